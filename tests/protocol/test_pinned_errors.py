"""protocol/errors.py: a ProtocolError's reason is a counter key and its text is one log line
of bounded length, whatever hostile input it quotes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import MAX_MESSAGE_CHARS, ProtocolError


def test_the_reason_is_the_counter_key_and_leads_the_line() -> None:
    error = ProtocolError("bad_type", "envelope: expected bytes")
    assert error.reason == "bad_type"
    assert error.message == "envelope: expected bytes"
    assert str(error) == "bad_type: envelope: expected bytes"


def test_without_a_message_the_reason_is_spelled_out() -> None:
    error = ProtocolError("missing_key")
    assert error.message == "missing key"
    assert str(error) == "missing_key: missing key"


def test_a_message_with_newlines_becomes_one_line() -> None:
    error = ProtocolError("malformed", "first\nsecond\t third  ")
    assert error.message == "first second third"
    assert "\n" not in str(error)


def test_a_message_at_the_cap_is_kept_whole() -> None:
    text = "x" * MAX_MESSAGE_CHARS
    assert ProtocolError("oversized", text).message == text


def test_a_longer_message_is_cut_to_the_cap_with_an_ellipsis() -> None:
    error = ProtocolError("oversized", "y" * (MAX_MESSAGE_CHARS + 1))
    assert error.message == "y" * (MAX_MESSAGE_CHARS - 3) + "..."
    assert len(error.message) == MAX_MESSAGE_CHARS


@given(st.text(max_size=3 * MAX_MESSAGE_CHARS))
def test_any_message_is_one_bounded_line(text: str) -> None:
    error = ProtocolError("malformed", text)
    assert len(error.message) <= MAX_MESSAGE_CHARS
    assert error.message == error.message.strip() and "\n" not in error.message
    assert str(error) == f"malformed: {error.message}"
