"""Length-prefixed frames for the direct request/response protocols.

Wire format of one frame: a 4-byte big-endian unsigned length, then that many bytes. The
decoder is sans-IO (bytes in, frames out) and enforces the size cap from the header alone,
before buffering the body, so an oversized claim costs the reader four bytes, not memory.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
MAX_FRAME_LIMIT = 0xFFFFFFFF


class FrameError(Exception):
    """The byte stream is not a valid frame sequence (too large, or truncated)."""


class FrameTooLarge(FrameError):
    def __init__(self, claimed: int, limit: int) -> None:
        super().__init__(f"frame of {claimed} bytes exceeds the {limit}-byte limit")
        self.claimed = claimed
        self.limit = limit


def encode_frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_LIMIT:
        raise FrameTooLarge(len(payload), MAX_FRAME_LIMIT)
    return HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Accumulates bytes and yields complete frames whose length is at most `max_frame_bytes`."""

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._expected: int | None = None

    @property
    def bytes_wanted(self) -> int:
        """How many more bytes complete the frame in progress (header or body)."""
        if self._expected is None:
            return HEADER_SIZE - len(self._buffer)
        return self._expected - len(self._buffer)

    @property
    def idle(self) -> bool:
        """True when no partial frame is buffered (a clean place for the stream to end)."""
        return self._expected is None and not self._buffer

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return every frame completed by them. Raises FrameTooLarge on a bad header."""
        frames: list[bytes] = []
        view = memoryview(data)
        while view:
            want = self.bytes_wanted
            take, view = view[:want], view[want:]
            self._buffer += take
            if len(self._buffer) < (HEADER_SIZE if self._expected is None else self._expected):
                break
            if self._expected is None:
                (length,) = HEADER.unpack(self._buffer)
                self._buffer.clear()
                if length > self.max_frame_bytes:
                    raise FrameTooLarge(length, self.max_frame_bytes)
                self._expected = length
                if length == 0:
                    frames.append(b"")
                    self._expected = None
            else:
                frames.append(bytes(self._buffer))
                self._buffer.clear()
                self._expected = None
        return frames
