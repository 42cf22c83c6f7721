"""protocol/logprobs.py: the messages of a refused log-prob vector, pinned. The reason code is
what peers count; the message is what an operator reads in the log of a rejection, so it names
the count of values (a whole number) and what was wrong, exactly."""

from __future__ import annotations

import math

import pytest

from protocol import codec, limits
from protocol.errors import ProtocolError
from protocol.logprobs import logprobs_error, pack_logprobs
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (
            [-1.0] * (limits.MAX_COMPLETION_TOKENS + 1),
            ("oversized", f"{limits.MAX_COMPLETION_TOKENS + 1} log-probs > {limits.MAX_COMPLETION_TOKENS}"),
        ),
        ([-1.0, math.nan], ("non_finite", "a log-prob is NaN or infinite")),
        ([-1.0, 0.5], ("out_of_range", "a log-prob is positive (0.5)")),
    ],
)
def test_a_refused_vector_says_what_was_wrong(values: list[float], error: tuple[str, str]) -> None:
    assert logprobs_error(pack_logprobs(values)) == error


def test_the_codec_raises_the_message_it_was_given() -> None:
    batch = RolloutBatch(
        "s",
        0,
        0,
        "p",
        (QuestionGroup(QuestionRef("t", 0, 0), (Completion("x", 1.0, pack_logprobs([math.inf])),)),),
    )
    with pytest.raises(ProtocolError) as caught:
        codec.encode(batch)
    assert (caught.value.reason, caught.value.message) == ("non_finite", "a log-prob is NaN or infinite")


def test_the_edges_are_accepted() -> None:
    # A log-prob of exactly 0 (a token sampled with probability 1) and exactly the cap of values.
    assert logprobs_error(pack_logprobs([0.0, -0.0])) is None
    assert logprobs_error(pack_logprobs([-1.0] * limits.MAX_COMPLETION_TOKENS)) is None
    assert logprobs_error(b"") is None
