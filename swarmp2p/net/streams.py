"""Reading and writing length-prefixed frames on libp2p streams."""

from __future__ import annotations

from typing import Any

from swarmp2p.net.frames import FrameDecoder, FrameError, encode_frame

_READ_CHUNK = 64 * 1024


class StreamEnded(FrameError):
    """The stream ended (EOF or reset) before a whole frame arrived."""


async def read_frame(stream: Any, max_frame_bytes: int) -> bytes:
    """Read exactly one frame of at most `max_frame_bytes` (FrameTooLarge / StreamEnded otherwise)."""
    decoder = FrameDecoder(max_frame_bytes)
    while True:
        try:
            chunk = await stream.read(min(_READ_CHUNK, max(decoder.bytes_wanted, 1)))
        except Exception as error:  # StreamEOF, StreamReset, closed muxer: all mean "ended"
            raise StreamEnded(f"stream ended mid-frame: {type(error).__name__}") from error
        if not chunk:
            raise StreamEnded("stream ended mid-frame")
        frames = decoder.feed(chunk)
        if frames:
            # One request or response per stream: trailing bytes after the frame are ignored.
            return frames[0]


async def write_frame(stream: Any, payload: bytes) -> None:
    await stream.write(encode_frame(payload))
