"""Per-token sampling log-probabilities of a completion, as they travel on the wire.

`Completion.logprobs` holds, for each token its author SAMPLED, the log-probability of that
token under the distribution that sampled it (logits / temperature, after any top-p cut). A
receiver uses them as the behaviour policy of truncated importance sampling (trainer/grpo.py):
another peer's text is not a sample of the receiver's own policy.

Wire form: float32, little-endian, packed into one msgpack bin; empty bytes = the author did
not say (the simulator's cheap policy, a completion longer than MAX_COMPLETION_TOKENS), and a
receiver then trains on the text with weight 1, as before log-probs travelled.

Why float32 packed into bytes rather than a msgpack array of floats: 4 bytes a token against 9
(msgpack writes every float as a float64 with a marker byte), one bin header per completion,
and decoding is one `array` call instead of one Python object per token. Why float32 and not
float16: float32 is what the trainer computes log-probs in (logits are upcast before the
softmax), so a peer's own values survive the round trip bit for bit; float16 would halve the
size again but round a log-prob of -8 by about 0.004, a 0.4% error on an importance weight,
the size of the sampler/trainer mismatch the weights exist to correct.

Rules (checked by the codec on encode and decode, and again by verification for a batch that
never crossed the wire): at most MAX_COMPLETION_TOKENS values, a whole number of float32s,
every value finite and <= 0 (a probability is at most 1).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence

from protocol.limits import MAX_COMPLETION_TOKENS

LOGPROB_BYTES = 4
"""One float32 per sampled token."""

MAX_LOGPROBS_BYTES = MAX_COMPLETION_TOKENS * LOGPROB_BYTES

_BIG_ENDIAN_HOST = sys.byteorder == "big"


def pack_logprobs(values: Sequence[float]) -> bytes:
    """The wire bytes of `values` (rounded to float32). Packing does not judge the values:
    `logprobs_error` on the result does (a float64 beyond float32's range becomes infinite)."""
    packed = array("f", values)
    if _BIG_ENDIAN_HOST:
        packed.byteswap()
    return packed.tobytes()


def unpack_logprobs(data: bytes) -> tuple[float, ...]:
    """The values packed in `data` (a whole number of float32s; check with `logprobs_error`)."""
    values = array("f")
    values.frombytes(data)
    if _BIG_ENDIAN_HOST:
        values.byteswap()
    return tuple(values)


def logprobs_error(data: bytes) -> tuple[str, str] | None:
    """(reason, message) when `data` breaks a rule of the wire form, else None. The reasons are
    ProtocolError's: oversized, malformed, non_finite, out_of_range."""
    if len(data) > MAX_LOGPROBS_BYTES:
        return "oversized", f"{len(data) // LOGPROB_BYTES} log-probs > {MAX_COMPLETION_TOKENS}"
    if len(data) % LOGPROB_BYTES:
        return "malformed", f"{len(data)} bytes is not a whole number of float32 log-probs"
    if not data:
        return None
    values = array("f")
    values.frombytes(data)
    if _BIG_ENDIAN_HOST:
        values.byteswap()
    # fsum and max run in C: fsum is non-finite (or raises, for inf and -inf together) exactly
    # when some value is; once none is NaN, max tells whether any is positive.
    try:
        finite = math.isfinite(math.fsum(values))
    except (OverflowError, ValueError):
        finite = False
    if not finite:
        return "non_finite", "a log-prob is NaN or infinite"
    if max(values) > 0.0:
        return "out_of_range", f"a log-prob is positive ({max(values)!r})"
    return None
