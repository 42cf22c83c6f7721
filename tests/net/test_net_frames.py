"""Length-prefixed framing of the direct request/response protocols (sans-IO decoder)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarmp2p.net.frames import HEADER_SIZE, FrameDecoder, FrameTooLarge, encode_frame


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_frames_survive_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder(max_frame_bytes=300)
    out: list[bytes] = []
    for chunk in _chunks(wire, cuts):
        out.extend(decoder.feed(chunk))
    assert out == payloads
    assert decoder.idle


@given(size=st.integers(min_value=1, max_value=2**32 - 1), limit=st.integers(min_value=0, max_value=1000))
def test_oversized_header_is_refused_before_the_body(size: int, limit: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=limit)
    header = size.to_bytes(4, "big")
    if size > limit:
        with pytest.raises(FrameTooLarge) as caught:
            decoder.feed(header)  # no body sent: the cap is enforced from the header alone
        assert caught.value.claimed == size
    else:
        assert decoder.feed(header) == []
        assert decoder.bytes_wanted == size


@given(payload=st.binary(min_size=1, max_size=200), keep=st.integers(min_value=0, max_value=200))
def test_truncated_frame_is_never_emitted(payload: bytes, keep: int) -> None:
    wire = encode_frame(payload)
    keep = min(keep, len(wire) - 1)
    decoder = FrameDecoder(max_frame_bytes=200)
    assert decoder.feed(wire[:keep]) == []
    assert decoder.idle == (keep == 0)
    if keep >= HEADER_SIZE:
        assert decoder.bytes_wanted == len(wire) - keep


def test_empty_frame_roundtrip() -> None:
    assert FrameDecoder(0).feed(encode_frame(b"")) == [b""]
