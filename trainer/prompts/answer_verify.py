"""The prompt of answer -> verify's verify stage (protocol/answer_verify.py)."""

from __future__ import annotations

from protocol.answer_verify import VerifyItem


def prompt(item: VerifyItem, question_text: str) -> str:
    """The question, the candidate answers numbered, and how to say which are right (one word
    per candidate, in order: what `parse_verdicts` reads)."""
    answers = "\n".join(f"Answer {i}: {text}" for i, text in enumerate(item.candidates, start=1))
    return (
        f"{question_text}\n\nCandidate answers:\n{answers}\n\n"
        f"Is each answer correct? Reply with {len(item.candidates)} words, yes or no, one per "
        "answer in order, as <answer>yes no ...</answer>."
    )
