"""Held-out evaluation in the round loop: when it is due, whether it fits, and what it reports.

The policy answers a fixed held-out question set with `policy.evaluate()` (trainer/policy.py;
simulator/policy.py has a simulated one with the same result shape). This module decides for the
Peer (swarmp2p/peer.py) WHEN to call it, so that `swarmp2p node` and the simulator share one path:

- Due: once before the first round (`before_train`) and then every `every` rounds this peer has
  finished (`every = 0`: never). Counting as `trainer.evaluation.eval_due` does.
- Fits: it runs in the worker thread after the round's train step and report, and only when the
  estimated duration fits before the next round starts: `margin * estimate + slack_s <= left`.
  The estimate is the last evaluation's duration; before any, this round's generation time per
  question times the held-out question count (generation samples G completions per question and
  evaluation one, so this over-estimates: it errs on the side of deferring).
- Otherwise deferred: counted (`eval_deferred`) and said in the log (`eval deferred: 3.1 s
  needed, 1.2 s left`) and in the round's record. A deferred evaluation gets a second chance in
  the next round's collect window (after its batch is published, the worker idles until the
  collect deadline, and the model is still the one the deferred step left), if it fits before
  that deadline (training must not wait for it); else it is tried after the next train step.

A result as it lands in a round record, the status and the dashboard is the policy's dict
(`step`, `accuracy`, `reward`, `questions`, `per_task`, `samples`, `seconds`, and `simulated`
from the simulated learner) plus `round`, the round after whose train step the model was
evaluated (None: before the first round), and `accuracy_change` (against the previous
evaluation; None for the first).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

log = logging.getLogger("swarmp2p.peer")

HISTORY_LIMIT = 500
"""Evaluations kept in `eval_history` (a point per evaluation: bounded for a long-lived node)."""


@attrs.frozen
class EvalSettings:
    """When a Peer evaluates on the held-out set (`swarmp2p node` fills it from [trainer])."""

    every: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Evaluate every this many finished rounds; 0 = never (not even before training)."""
    before_train: bool = True
    """Evaluate once before the first round: the curve's starting point and the first estimate."""
    questions: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Held-out questions in all (per task x tasks): sizes the first estimate. 0 = unknown: the
    first evaluation then runs without an estimate (it is what measures one)."""
    margin: float = attrs.field(default=1.25, validator=attrs.validators.ge(1.0))
    """Safety factor on the estimate (evaluation time varies with completion lengths)."""
    slack_s: float = attrs.field(default=0.5, validator=attrs.validators.ge(0.0))
    """Seconds kept free before the next round on top of the estimate."""


def _stopping() -> bool:
    return trio.current_effective_deadline() == -math.inf


class HeldOutEvaluation:
    """One peer's evaluation schedule and results. `counters` is the Peer's Counter: it gains
    `evaluations`, `eval_deferred` and `eval_failed`."""

    def __init__(self, settings: EvalSettings, counters: Counter[str], name: str = "") -> None:
        self.settings = settings
        self.counters = counters
        self.name = name
        self.rounds_done = 0  # rounds this peer finished (trained and reported)
        self.last_at: int | None = None  # `rounds_done` at the last evaluation
        self.last: dict[str, Any] | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_LIMIT)
        self.last_deferred: dict[str, Any] | None = None
        self.estimate_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.every > 0

    def wants_before_train(self) -> bool:
        return self.enabled and self.settings.before_train and self.last is None

    def due(self) -> bool:
        if not self.enabled:
            return False
        if self.last_at is None:
            return self.settings.before_train or self.rounds_done >= self.settings.every
        return self.rounds_done - self.last_at >= self.settings.every

    def needed_s(self, generate_s: float | None, generated_questions: int) -> float | None:
        """Seconds to keep free for an evaluation now (None: no estimate yet)."""
        estimate = self.estimate_s
        questions = self.settings.questions
        if estimate is None and generate_s is not None and generated_questions > 0 and questions:
            estimate = generate_s / generated_questions * questions
        if estimate is None:
            return None
        return self.settings.margin * estimate + self.settings.slack_s

    def record(self, result: Mapping[str, Any], round_number: int | None, elapsed_s: float) -> dict[str, Any]:
        """Keep one evaluation's result; returns it as it goes into the round record."""
        entry = dict(result)
        entry["round"] = round_number
        previous = self.last
        accuracy = entry.get("accuracy")
        change = None
        if previous is not None and _number(accuracy) and _number(previous.get("accuracy")):
            change = accuracy - previous["accuracy"]
        entry["accuracy_change"] = change
        self.last = entry
        self.last_at = self.rounds_done
        self.last_deferred = None
        self.estimate_s = max(elapsed_s, float(entry.get("seconds") or 0.0))
        self.history.append(
            {
                "round": round_number,
                "step": entry.get("step"),
                "accuracy": accuracy,
                "reward": entry.get("reward"),
            }
        )
        self.counters["evaluations"] += 1
        return entry

    async def run(
        self,
        policy: Any,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        round_number: int | None,
    ) -> dict[str, Any] | None:
        """Evaluate now (no timing check). None when the policy cannot evaluate or failed."""
        evaluate = getattr(policy, "evaluate", None)
        if evaluate is None:
            return None
        started = now_ms()
        try:
            result = await offload(evaluate)
        except Exception:
            if _stopping():
                return None
            log.exception("%s: held-out evaluation failed", self.name)
            self.counters["eval_failed"] += 1
            # Not retried every round: a broken evaluation waits for its next turn.
            self.last_at = self.rounds_done
            return None
        return self.record(result, round_number, (now_ms() - started) / 1000)

    async def after_round(
        self,
        policy: Any,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        round_number: int,
        round_ends_ms: int,
        generate_s: float | None,
        generated_questions: int,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A round finished (trained and reported): evaluate if due and it fits before
        `round_ends_ms`. Returns (the result, None), (None, the deferral) or (None, None)."""
        self.rounds_done += 1
        if not self.due() or getattr(policy, "evaluate", None) is None:
            return None, None
        needed = self.needed_s(generate_s, generated_questions)
        left = (round_ends_ms - now_ms()) / 1000
        if needed is not None and needed > left:
            left = max(0.0, left)
            deferred = {"round": round_number, "needed_s": round(needed, 3), "left_s": round(left, 3)}
            self.last_deferred = deferred
            self.counters["eval_deferred"] += 1
            log.info(
                "%s: eval deferred: %.1f s needed, %.1f s left in round %d",
                self.name,
                needed,
                left,
                round_number,
            )
            return None, deferred
        return await self.run(policy, offload, now_ms, round_number), None

    async def while_collecting(
        self,
        policy: Any,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        collect_until_ms: int,
    ) -> dict[str, Any] | None:
        """Run the evaluation deferred after the previous train step, if it fits before
        `collect_until_ms`. Returns its result, else None (it stays deferred, already said)."""
        deferred = self.last_deferred
        if deferred is None or not self.due():
            return None
        needed = self.needed_s(None, 0)
        if needed is None or needed > (collect_until_ms - now_ms()) / 1000:
            return None
        return await self.run(policy, offload, now_ms, deferred["round"])

    def status(self) -> dict[str, Any]:
        """The status keys: `eval` (last result), `eval_history`, `eval_deferred` (the latest
        deferral since the last evaluation, else None)."""
        return {
            "eval": self.last,
            "eval_history": list(self.history),
            "eval_deferred": self.last_deferred,
        }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def describe(result: Mapping[str, Any]) -> str:
    """`acc 0.312 (+0.050) reward 0.420` for log lines."""
    text = f"acc {result.get('accuracy', float('nan')):.3f}"
    change = result.get("accuracy_change")
    if _number(change):
        text += f" ({change:+.3f})"
    if _number(result.get("reward")):
        text += f" reward {result['reward']:.3f}"
    return text
