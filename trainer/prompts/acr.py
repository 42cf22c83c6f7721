"""The prompts of answer -> critique -> resolve's later stages (protocol/acr.py)."""

from __future__ import annotations

from protocol.acr import CRITIQUE, StageItem


def prompt(item: StageItem, question_text: str) -> str:
    """The prompt of a later-stage item (critique or resolve), around the question's text."""
    if item.stage == CRITIQUE:
        return critique_prompt(item, question_text)
    return resolve_prompt(item, question_text)


def critique_prompt(item: StageItem, question_text: str) -> str:
    """The prompt a policy answers for a critique item (the trainer supplies the question text)."""
    answers = "\n".join(f"Answer {i}: {text}" for i, text in enumerate(item.candidates, start=1))
    return (
        f"{question_text}\n\nCandidate answers:\n{answers}\n\n"
        "Which answer is correct? Reply with its number as <answer>N</answer>."
    )


def resolve_prompt(item: StageItem, question_text: str) -> str:
    """The prompt a policy answers for a resolve item: the question, the candidates and the
    critics' majority pick; the final answer is scored like a stage-0 answer."""
    answers = "\n".join(f"Answer {i}: {text}" for i, text in enumerate(item.candidates, start=1))
    majority = item.majority()
    verdict = f"Most critics picked answer {majority}." if majority else "The critics picked none."
    return f"{question_text}\n\nCandidate answers:\n{answers}\n{verdict}\n\nGive the final answer."
