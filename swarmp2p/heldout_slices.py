"""Held-out evaluation in slices: the pieces `swarmp2p/heldout.py` needs to spread one evaluation
over the worker's spare moments of several rounds.

A policy that can answer its held-out set a generation batch at a time offers
`sliced_evaluation()` (trainer/policy.py: a trainer.evaluation.SlicedEvaluation); any other
policy's `evaluate()` is one unit (`WholeAsOneUnit`), so the schedule treats both alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swarmp2p.ports import PolicyPort


class WholeAsOneUnit:
    """A policy's whole `evaluate()` as a sliced evaluation of one unit.

    A sliced evaluation has `units` (ranges of held-out questions), `unit_steps` (the policy
    step each answered unit ran at), `done`, `complete`, `answer_next()`, `drop_last()` (forget
    the last unit: it ran past its deadline) and `result()`."""

    keeps_itself = True
    """`evaluate()` already kept its result (the trainer's eval.jsonl): nothing to keep after."""

    def __init__(self, policy: PolicyPort) -> None:
        self.policy = policy
        self._result: dict[str, Any] | None = None
        self.units: list[range] = [range(1)]
        self.unit_steps: list[int] = []

    @property
    def done(self) -> int:
        return len(self.unit_steps)

    @property
    def complete(self) -> bool:
        return self._result is not None

    def answer_next(self) -> int:
        result = dict(self.policy.evaluate())
        questions = int(result.get("questions") or 0)
        self.units = [range(questions)]
        self.unit_steps = [int(result.get("step") or 0)]
        self._result = result
        return questions

    def drop_last(self) -> None:
        self._result = None
        self.unit_steps = []

    def result(self) -> dict[str, Any]:
        if self._result is None:
            raise RuntimeError("the evaluation has not run")
        return dict(self._result)


def slicer_of(policy: PolicyPort) -> Any:
    """A new evaluation of `policy`'s held-out set to answer unit by unit."""
    make = getattr(policy, "sliced_evaluation", None)
    return make() if callable(make) else WholeAsOneUnit(policy)


def slices_of(
    units: Sequence[range], steps: Sequence[int], rounds: Sequence[int | None]
) -> list[dict[str, Any]]:
    """Which weights answered which questions: consecutive units answered with the weights of one
    round (and step) merge into `{"round", "step", "questions"}`; round None: the weights the
    node started with, before its first train step."""
    slices: list[dict[str, Any]] = []
    for unit, step, round_number in zip(units, steps, rounds, strict=True):
        if slices and (slices[-1]["round"], slices[-1]["step"]) == (round_number, step):
            slices[-1]["questions"] += len(unit)
        else:
            slices.append({"round": round_number, "step": step, "questions": len(unit)})
    return slices


def describe_slices(slices: Sequence[dict[str, Any]]) -> str:
    """`in 3 slices, weights of start..round 4` for the eval line (empty for one slice)."""
    if len(slices) <= 1:
        return ""

    def name(round_number: int | None) -> str:
        return "start" if round_number is None else f"round {round_number}"

    first, last = slices[0]["round"], slices[-1]["round"]
    weights = name(first) if first == last else f"{name(first)}..{name(last)}"
    return f"in {len(slices)} slices, weights of {weights}"
