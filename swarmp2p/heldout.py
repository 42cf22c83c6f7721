"""Held-out evaluation in the round loop: when it is due, whether it fits, and what it reports.

The policy answers a fixed held-out question set with `policy.evaluate()` (trainer/policy.py;
simulator/policy.py has a simulated one with the same result shape). This module decides for the
Peer (swarmp2p/peer.py) WHEN to call it, so that `swarmp2p node` and the simulator share one path:

- Due: once before the first round (`before_train`) and then every `every` rounds this peer has
  finished (`every = 0`: never): `trainer.evaluation.evaluation_due`, the rule `swarmp2p train`
  follows in steps.
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
- Stopped at the deadline: whatever the estimate said, an evaluation still running `slack_s`
  before its deadline is stopped (a cancellable policy's `cancel()`, then `reset_cancel()`; a
  cancel scope on virtual time), counted (`eval_stopped`) and said as a deferral: no round is
  ever late for it.
- Probed: after `probe_after` deferrals in a row it is tried anyway (stopped at the deadline if
  it does not finish), so that one duration measured under a load spike cannot defer it forever.

Sliced (`EvalSettings.sliced`, what `swarmp2p node` uses): instead of one whole evaluation that
must fit in one stretch, the worker answers the held-out set a generation batch (a unit) at a
time in every spare moment (the collect window after publishing, the rest of the round after
the report), as many units as fit, each stopped at the deadline like a whole evaluation; one
evaluation completes over several rounds (heldout_slices.py; trainer.evaluation.SlicedEvaluation).
The questions and the sampling are those of a whole evaluation, so the per-question results and
their interval are computed alike; the weights are not one set: training goes on between the
units. The result says which rounds' weights answered how many questions (`slices`), and the
point is that of the newest weights it includes: its `round` is the round whose train step
came before its last unit (None when every unit ran on the weights the node started with: the
start point). A new evaluation starts `every` rounds after the previous one started (at once
when that one took longer), and the evaluation before training is just the first: it starts
with the first spare moment, so the round loop never waits for it.

A result as it lands in a round record, the status and the dashboard is the policy's dict
(`step`, `accuracy`, `reward`, `questions`, `per_task`, `samples`, `seconds`, and `simulated`
from the simulated learner) plus `round`, the round after whose train step the model was
evaluated (None: before the first round), and `accuracy_change` (against the previous
evaluation; None for the first), and `gain_since_start` (against the first evaluation, with
its 95% interval over the questions; absent on the first).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from swarmp2p.heldout_slices import describe_slices, slicer_of, slices_of
from trainer.evaluation import evaluation_due
from trainer.intervals import Interval, gain_interval

if TYPE_CHECKING:
    from swarmp2p.ports import PolicyPort

log = logging.getLogger("swarmp2p.peer")

PROBE_MIN_S = 2.0
"""A probe (an evaluation tried although its estimate does not fit) needs at least this long."""

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
    """Seconds kept free before the deadline on top of the estimate; an evaluation still running
    this long before the deadline is stopped (so a wrong estimate cannot make a round late)."""
    probe_after: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    """After this many deferrals in a row, try anyway (stopped at the deadline if it does not
    finish): a measurement taken under a load spike must not defer evaluation forever. 0: never."""
    sliced: bool = False
    unit_margin: float = attrs.field(default=1.05, validator=attrs.validators.ge(1.0))
    """Sliced: safety factor on one unit's estimate. Smaller than `margin`: a unit still running
    at the deadline is stopped like a whole evaluation, and costs only its own few seconds."""
    """Evaluate in slices in the worker's spare moments of several rounds (see the module); False:
    whole evaluations, deferred when one does not fit."""


def _never() -> bool:
    return False


class HeldOutEvaluation:
    """One peer's evaluation schedule and results. `counters` is the Peer's Counter: it gains
    `evaluations`, `eval_deferred`, `eval_stopped` and `eval_failed`. `stopping` says whether
    the node is stopping (its stop also cancels the policy): an evaluation that fails then is
    not a failure, and the node's cancel is not undone."""

    def __init__(
        self,
        settings: EvalSettings,
        counters: Counter[str],
        name: str = "",
        *,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.stopping = stopping or _never
        self.counters = counters
        self.name = name
        self.rounds_done = 0  # rounds this peer finished (trained and reported)
        self.last_at: int | None = None  # `rounds_done` at the last evaluation
        self.last: dict[str, Any] | None = None
        self.first: dict[str, Any] | None = None
        """The first evaluation (before joining): every later one says its gain since then."""
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_LIMIT)
        self.last_deferred: dict[str, Any] | None = None
        self.deferred_in_a_row = 0
        self.estimate_s: float | None = None
        self.tried_before_train = False  # set by `run(round_number=None)`, or by the node
        # Sliced: the evaluation in progress, the round whose weights each answered unit used,
        # `rounds_done` when it started, and the seconds one unit is expected to take.
        self.cycle: Any = None
        self.cycle_rounds: list[int | None] = []
        self.cycle_started_at = 0
        self.unit_estimate_s: float | None = None
        self.weights_round: int | None = None  # the round whose train step made the weights

    @property
    def enabled(self) -> bool:
        return self.settings.every > 0

    def wants_before_train(self) -> bool:
        """Whether the evaluation before the first round is still to be tried (once)."""
        return self.enabled and self.settings.before_train and not self.tried_before_train

    def due(self) -> bool:
        return evaluation_due(
            every=self.settings.every,
            before_train=self.settings.before_train,
            updates=self.rounds_done,
            last_at=self.last_at,
        )

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
        if self.first is None:
            self.first = entry
        else:
            entry["gain_since_start"] = _gain_since(self.first, entry)
        self.last = entry
        self.last_at = self.rounds_done
        self.last_deferred = None
        self.deferred_in_a_row = 0
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
        policy: PolicyPort,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        round_number: int | None,
        budget_s: float = math.inf,
    ) -> tuple[dict[str, Any] | None, bool]:
        """Evaluate now, stopped after `budget_s`. (result, False) when it ran; (None, True)
        when it was stopped at the budget; (None, False) when it failed (counted, logged) or the
        node is stopping."""
        if round_number is None:
            self.tried_before_train = True
            if self.settings.sliced:
                return None, False  # it starts in the first spare moment: no round waits for it
        started = now_ms()
        try:
            result, stopped = await _bounded(policy, offload, budget_s, self.stopping)
        except Exception:
            if self.stopping():
                return None, False
            log.exception("%s: held-out evaluation failed", self.name)
            self.counters["eval_failed"] += 1
            # Not retried every round: a broken evaluation waits for its next turn.
            self.last_at = self.rounds_done
            return None, False
        if result is None:
            return None, stopped
        return self.record(result, round_number, (now_ms() - started) / 1000), False

    async def after_round(
        self,
        policy: PolicyPort,
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
        self.weights_round = round_number
        if self.settings.sliced:
            return await self.slices(policy, offload, now_ms, round_ends_ms), None
        if not self.due():
            return None, None
        needed = self.needed_s(generate_s, generated_questions)
        window = (round_ends_ms - now_ms()) / 1000
        return await self._attempt(policy, offload, now_ms, round_number, round_number, window, needed)

    async def while_collecting(
        self,
        policy: PolicyPort,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        round_number: int,
        collect_until_ms: int,
        generate_s: float | None,
        generated_questions: int,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Round `round_number`'s batch is out and the worker idles until `collect_until_ms`:
        the evaluation deferred after the previous train step runs now if it fits (the model
        is still the one that step left). Silent when it does not fit (already said)."""
        if self.settings.sliced:
            return await self.slices(policy, offload, now_ms, collect_until_ms), None
        deferred = self.last_deferred
        if deferred is None or not self.due():
            return None, None
        window = (collect_until_ms - now_ms()) / 1000
        needed = self.needed_s(generate_s, generated_questions)
        return await self._attempt(
            policy, offload, now_ms, round_number, deferred["round"], window, needed, quiet=True
        )

    async def _attempt(
        self,
        policy: PolicyPort,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        round_number: int,
        model_round: int,
        window_s: float,
        needed_s: float | None,
        quiet: bool = False,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Evaluate within `window_s` (stopped `slack_s` before its end whatever the estimate
        said), or defer. A probe runs although the estimate does not fit, after `probe_after`
        deferrals in a row: one slow measurement (a load spike) must not defer evaluation forever."""
        settings = self.settings
        budget = window_s - settings.slack_s
        fits = needed_s is None or needed_s <= window_s
        # A probe in a sliver of a window (a round that ran late) would only be stopped.
        probe = 0 < settings.probe_after <= self.deferred_in_a_row and budget >= PROBE_MIN_S
        if budget <= 0 or not (fits or probe):
            if quiet:
                return None, None
            return None, self._defer(round_number, needed_s, window_s, None)
        started = now_ms()
        result, stopped = await self.run(policy, offload, now_ms, model_round, budget)
        if result is not None:
            return result, None
        if not stopped:
            return None, None
        # It did not finish in time: stopped at the budget, so the round is still on time.
        elapsed = (now_ms() - started) / 1000
        self.counters["eval_stopped"] += 1
        self.estimate_s = max(self.estimate_s or 0.0, elapsed)
        return None, self._defer(round_number, needed_s, window_s, elapsed)

    def _defer(
        self, round_number: int, needed_s: float | None, window_s: float, stopped_after_s: float | None
    ) -> dict[str, Any]:
        left = max(0.0, window_s)
        needed = needed_s if needed_s is not None else math.nan
        deferred: dict[str, Any] = {
            "round": round_number,
            "needed_s": None if needed_s is None else round(needed_s, 3),
            "left_s": round(left, 3),
        }
        if stopped_after_s is None:
            self.deferred_in_a_row += 1
            # debug: a node's round line says it already ("| eval deferred: ..."), once is enough
            log.debug("%s: eval deferred: %.1f s needed, %.1f s left", self.name, needed, left)
        else:
            deferred["stopped_after_s"] = round(stopped_after_s, 3)
            self.deferred_in_a_row = 0  # the next probe after `probe_after` more deferrals
            log.debug(
                "%s: eval deferred: stopped at the deadline after %.1f s (%.1f s needed, %.1f s left)",
                self.name,
                stopped_after_s,
                needed,
                left,
            )
        self.last_deferred = deferred
        self.counters["eval_deferred"] += 1
        return deferred

    @property
    def in_progress(self) -> bool:
        """Sliced: an evaluation has started and is not complete yet."""
        return self.cycle is not None

    def sliced_due(self) -> bool:
        """Sliced: whether a new evaluation starts now (`every` rounds after the last one started)."""
        if self.cycle is not None or not self.enabled:
            return False
        if self.first is None and self.last_at is None:
            return self.settings.before_train or self.rounds_done >= self.settings.every
        return self.rounds_done - (self.last_at or 0) >= self.settings.every

    async def slices(
        self,
        policy: PolicyPort,
        offload: Callable[..., Awaitable[Any]],
        now_ms: Callable[[], int],
        until_ms: int,
    ) -> dict[str, Any] | None:
        """Sliced: answer units of the evaluation in progress (starting one when due) while the
        next fits before `until_ms`; returns the result when this completes it, else None."""
        settings = self.settings
        if self.cycle is None:
            if not self.sliced_due():
                return None
            try:
                self.cycle = await offload(slicer_of, policy)
            except Exception:
                return self._slice_failed()
            self.cycle_rounds = []
            self.cycle_started_at = self.last_at = self.rounds_done
        cycle = self.cycle
        answered = 0
        while not cycle.complete:
            budget = (until_ms - now_ms()) / 1000 - settings.slack_s
            needed = None if self.unit_estimate_s is None else settings.unit_margin * self.unit_estimate_s
            fits = budget >= (PROBE_MIN_S if needed is None else needed)
            probe = 0 < settings.probe_after <= self.deferred_in_a_row and budget >= PROBE_MIN_S
            if budget <= 0 or not (fits or probe):
                if answered == 0:
                    self.deferred_in_a_row += 1
                break
            started, done = now_ms(), cycle.done
            try:
                _, stopped = await _bounded(policy, offload, budget, self.stopping, cycle.answer_next)
            except Exception:
                return self._slice_failed()
            elapsed = (now_ms() - started) / 1000
            if stopped:  # a slow unit: stopped at the deadline, answered again from the start later
                if cycle.done > done:  # answered inline, its compute time cut short (the simulator)
                    cycle.drop_last()
                self.counters["eval_stopped"] += 1
                self.unit_estimate_s = max(self.unit_estimate_s or 0.0, elapsed)
                self.deferred_in_a_row = 0  # the next probe after `probe_after` more misses
                break
            answered += 1
            self.deferred_in_a_row = 0
            self.cycle_rounds.append(self.weights_round)
            # The last unit's time, or more while the estimate comes down from a slow one.
            previous = self.unit_estimate_s
            self.unit_estimate_s = elapsed if previous is None else max(elapsed, (previous + elapsed) / 2)
        self.counters["eval_units"] += answered
        if not cycle.complete:
            return None
        return await self._complete(policy, offload, cycle)

    async def _complete(
        self, policy: PolicyPort, offload: Callable[..., Awaitable[Any]], cycle: Any
    ) -> dict[str, Any]:
        self.cycle = None
        result = cycle.result()
        result["slices"] = slices_of(cycle.units, cycle.unit_steps, self.cycle_rounds)
        keep = getattr(policy, "keep_sliced_result", None)
        if callable(keep) and not getattr(cycle, "keeps_itself", False):
            try:  # in the worker: it writes eval.jsonl and may hash the weights
                await offload(keep, result)
            except Exception:
                log.exception("%s: keeping the held-out result failed", self.name)
        entry = self.record(result, self.cycle_rounds[-1], float(result.get("seconds") or 0.0))
        self.last_at = self.cycle_started_at  # the next starts `every` rounds after this one did
        return entry

    def _slice_failed(self) -> None:
        self.cycle = None
        if self.stopping():
            return None
        log.exception("%s: held-out evaluation failed", self.name)
        self.counters["eval_failed"] += 1
        self.last_at = self.rounds_done  # not retried every round: it waits for its next turn
        return None

    def status(self) -> dict[str, Any]:
        """The status keys: `eval` (last result), `eval_history`, `eval_deferred` (the latest
        deferral since the last evaluation, else None), `eval_progress` (sliced: the evaluation
        in progress, `{"units", "done", "since_round"}`, else None)."""
        progress = None
        cycle = self.cycle
        if cycle is not None:
            first_weights = self.cycle_rounds[0] if self.cycle_rounds else self.weights_round
            progress = {"units": len(cycle.units), "done": cycle.done, "since_round": first_weights}
        return {
            "eval": self.last,
            "eval_history": list(self.history),
            "eval_deferred": self.last_deferred,
            "eval_progress": progress,
        }


async def _bounded(
    policy: PolicyPort,
    offload: Callable[..., Awaitable[Any]],
    budget_s: float,
    stopping: Callable[[], bool] = _never,
    call: Callable[[], Any] | None = None,
) -> tuple[Any, bool]:
    """`policy.evaluate` (or `call`) through `offload`, stopped after `budget_s`: (result, False) or
    (None, True). Stopping takes both a cancel scope (it ends the simulator's virtual compute
    time) and, for a `cancellable` policy (trainer/policy.py), a call to `cancel()` from a
    watchdog task: a worker thread is not interrupted by a cancel scope, and the trainer stops
    at its next decoding step (then `reset_cancel()`, unless the node is `stopping`: its own
    cancel must stand). Other exceptions propagate."""
    fired = False

    async def watchdog() -> None:
        nonlocal fired
        await trio.sleep(budget_s)
        fired = True
        policy.cancel()

    result: Any = None
    error: Exception | None = None
    async with trio.open_nursery() as nursery:
        if policy.cancellable and math.isfinite(budget_s):
            nursery.start_soon(watchdog)
        try:
            with trio.move_on_after(budget_s):
                result = await offload(call or policy.evaluate)
        except Exception as caught:  # raised after the nursery: never wrapped in a group
            error = caught
        nursery.cancel_scope.cancel()
    ours = fired and not stopping()
    if ours:
        policy.reset_cancel()  # the next generate/train must not see our cancel
    if error is not None and not ours:
        raise error
    return result, result is None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _gain_since(first: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, float] | None:
    """The gain from the first evaluation to `entry`, with its 95% interval over the questions
    (paired per question); None when either lacks per-question results (the simulated learner)."""
    before, after = first.get("per_question"), entry.get("per_question")
    if not before or not after or len(before) != len(after):
        return None
    return gain_interval(before, after).as_dict()


def describe(result: Mapping[str, Any]) -> str:
    """`acc 0.312 [0.281, 0.344] (+0.050) reward 0.420, gain since start +0.061 [+0.020, +0.101]`
    for log lines (95% intervals over the held-out questions); an evaluation answered in several
    slices adds `(in 3 slices, weights of round 4..round 6)`."""
    text = f"acc {result.get('accuracy', float('nan')):.3f}"
    interval = result.get("accuracy_interval")
    if isinstance(interval, Mapping) and _number(interval.get("low")) and _number(interval.get("high")):
        text += f" [{interval['low']:.3f}, {interval['high']:.3f}]"
    change = result.get("accuracy_change")
    if _number(change):
        text += f" ({change:+.3f})"
    if _number(result.get("reward")):
        text += f" reward {result['reward']:.3f}"
    gain = result.get("gain_since_start")
    if isinstance(gain, Mapping) and all(_number(gain.get(k)) for k in ("mean", "low", "high")):
        text += f", gain since start {Interval(**gain).text()}"
    slices = result.get("slices")
    if isinstance(slices, list) and len(slices) > 1 and all(isinstance(piece, Mapping) for piece in slices):
        text += f" ({describe_slices(slices)})"
    return text


def describe_deferral(deferred: Mapping[str, Any]) -> str:
    """`eval deferred: 3.1 s needed, 1.2 s left` (`..., stopped after 1.0 s` for a try that did
    not finish before the deadline) for log lines."""
    needed = deferred.get("needed_s")
    text = "eval deferred: " + (f"{needed:.1f} s needed" if _number(needed) else "no estimate")
    text += f", {deferred.get('left_s', 0.0):.1f} s left"
    stopped = deferred.get("stopped_after_s")
    if _number(stopped):
        text += f", stopped after {stopped:.1f} s"
    return text
