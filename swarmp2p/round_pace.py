"""How much of its own work a peer takes on per round, so that generate + train fit the round.

On a busy host a peer's generation and training step can outlast the round: its training ends
after the round did, the report misses it, and the next round starts late. The swarm's rules
let a peer answer any subset of its assigned questions (verification checks that each question
is assigned, never that all are) and choose its own sampling split (`n_local`, `n_external`),
so a peer that keeps overrunning halves both, and doubles them back once a round shows room for
the larger share. Nothing else changes: the questions it does answer, its completions and the
batches it trains on are exactly what the rules ask of any peer.

Before any of that, a policy that computes on several CPU threads drops to one (the first
level, `threads`): on a host with more runnable threads than cores, torch's OpenMP threads wait
for each other at every operation, and one thread ran the default tiny model's generate + train
12x faster than two on a 2-core host at load 15 (docs/node.md, "On a busy host"). It costs no
share of the work, so it comes first.

A multi-stage game plays no pace (the Peer neither observes nor cuts its rounds): its later
stages answer items built from every peer's earlier batches, so answering fewer would leave
others less to build on; a stage that does not train has no training step to judge (`judge`
would call each such stage an overrun); and each stage is a cycle of its own whose timings
say little about the next stage's work. Its rounds are skipped by the share of the stage left
alone (no measured generation: `GenerationTimes` is fed by one-stage rounds only).

Sans-IO: `Pace.observe` takes a round's timings and returns the change to say, if any; the
Peer applies `share` to the next round. Each verdict moves the level only after a run of
rounds in a row (`STREAK`), by `STEP`: one late round (a slow checkpoint save, a burst of
load) changes nothing. A step back up that is undone by the next step (the host was still
busy: room at one thread says nothing of two) doubles the run the next step up needs.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

from swarmp2p.peer_settings import PeerSettings
from swarmp2p.round_record import RoundWork


class Verdict(enum.Enum):
    OVERRAN = "overran"  # the round ended before its training step did (or before it ran)
    TIGHT = "tight"  # it fit, with too little room to double the work
    ROOMY = "roomy"  # it fit, and would have with the next larger share too


STREAK: dict[Verdict, int] = {Verdict.OVERRAN: 2, Verdict.ROOMY: 3}
"""Rounds in a row with this verdict before the level moves (a TIGHT round ends every run)."""

STEP: dict[Verdict, int] = {Verdict.OVERRAN: +1, Verdict.ROOMY: -1}
"""How the level moves after such a run: down to half the work, or back up to twice."""

MAX_LEVEL = 6
"""Level k does 1/2**k of the work, down to one question and one group of each side trained on
(`deepest_level`: 2 for the defaults, 4 questions and 4 + 4 groups), the least that still takes
part in the swarm; this bounds it for any settings."""

T = TypeVar("T")


@attrs.frozen
class RoundTimes:
    """When one round's work ran, in the clock's milliseconds (None: it did not get there)."""

    opened_ms: int
    round_ends_ms: int
    generate_ms: int | None
    train_started_ms: int | None
    train_finished_ms: int | None


def judge(times: RoundTimes, growth: float) -> Verdict:
    """OVERRAN when the training step did not finish by the round's end; ROOMY when the time
    left after it would absorb the round's work growing by `growth` (2.0: doubled) even with
    the extra generation and training run back to back, which is conservative: generation
    overlaps the collect window, so a ROOMY round really has that room."""
    finished = times.train_finished_ms
    if finished is None or finished > times.round_ends_ms:
        return Verdict.OVERRAN
    started = times.train_started_ms if times.train_started_ms is not None else finished
    work_ms = (times.generate_ms or 0) + (finished - started)
    return Verdict.ROOMY if times.round_ends_ms - finished >= (growth - 1.0) * work_ms else Verdict.TIGHT


def scaled(count: int, share: float) -> int:
    """`count` at `share`, rounded up, never below 1 unless it was 0 (a side the peer does not
    train on stays off)."""
    return 0 if count <= 0 else max(1, math.ceil(count * share))


@attrs.define
class Pace:
    """The level of a peer's own work (0: everything the settings ask)."""

    level: int = 0
    verdict: Verdict | None = None
    streak: int = 0
    since_round: int | None = None
    """The first round played at the current level (None at level 0)."""
    reason: str = ""
    threads: int = 1
    """The policy's compute threads at full pace; above 1, level 1 computes on one thread."""
    relapses: int = 0
    """Steps up undone by the next step down: each doubles the ROOMY run a step up needs."""
    last_step: int = 0

    @property
    def thread_levels(self) -> int:
        return 1 if self.threads > 1 else 0

    @property
    def share(self) -> float:
        return 2.0 ** -max(0, self.level - self.thread_levels)

    @property
    def use_threads(self) -> int:
        return 1 if self.level >= self.thread_levels > 0 else self.threads

    def observe(self, round_number: int, times: RoundTimes, deepest: int = MAX_LEVEL) -> str | None:
        """Take one round's timings; returns the line to say when the level changes (never
        below `deepest`, where every count is already 1)."""
        verdict = judge(times, growth=2.0 if self.level > 0 else 1.0)
        self.streak = self.streak + 1 if verdict is self.verdict else 1
        self.verdict = verdict
        needed = STREAK.get(verdict)
        if needed is not None and verdict is Verdict.ROOMY:
            needed <<= min(self.relapses, 5)
        if needed is None or self.streak < needed:
            return None
        level = min(deepest + self.thread_levels, MAX_LEVEL, max(0, self.level + STEP[verdict]))
        if level == self.level:
            return None
        step = level - self.level
        if step > 0 and self.last_step < 0:
            self.relapses += 1
        self.level, self.streak, self.verdict, self.last_step = level, 0, None, step
        self.since_round = round_number + 1 if level > 0 else None
        if verdict is Verdict.OVERRAN:
            self.reason = f"generate + train overran {needed} rounds in a row"
        else:
            self.reason = f"{needed} rounds in a row had room for twice the work" if level > 0 else ""
        return self.reason

    def own_questions(self, questions: Sequence[T]) -> tuple[T, ...]:
        """The first `share` of the assigned questions (a subset verifies like the whole)."""
        return tuple(questions[: scaled(len(questions), self.share)])

    def status(self, questions: int, n_local: int, n_external: int) -> dict[str, Any]:
        """For /api/status: the level, and what the peer does at it out of what it would."""
        return {
            "level": self.level,
            "share": self.share,
            "threads": self.use_threads,
            "of_threads": self.threads,
            "questions": scaled(questions, self.share),
            "of_questions": questions,
            "n_local": scaled(n_local, self.share),
            "n_external": scaled(n_external, self.share),
            "since_round": self.since_round,
            "reason": self.reason,
        }

    def settings_for(self, settings: PeerSettings) -> PeerSettings:
        """`settings` with the training split at this level's share."""
        if self.level == 0:
            return settings
        return attrs.evolve(
            settings,
            n_local=scaled(settings.n_local, self.share),
            n_external=scaled(settings.n_external, self.share),
        )

    def line(self, settings: PeerSettings) -> str:
        """What the node says once when the level changes."""
        now = self.status(settings.questions_per_round, settings.n_local, settings.n_external)
        doing = (
            f"answering {now['questions']} of {now['of_questions']} questions and training on "
            f"{now['n_local']} local + {now['n_external']} external groups"
        )
        if self.threads > 1:
            doing = f"computing on {self.use_threads} of {self.threads} threads, {doing}"
        if self.level == 0:
            return f"rounds fit again: back to {doing}"
        share = f" ({self.share:g} of the work)" if self.share < 1 else ""
        return (
            f"busy host: {self.reason}: from round {self.since_round} {doing}{share} until rounds fit again"
        )


def policy_threads(policy: Any) -> int:
    """The compute threads of a policy that can change them (`compute_threads` and
    `set_compute_threads`: the node's TimedPolicy), else 1 (no thread level)."""
    if not callable(getattr(policy, "set_compute_threads", None)):
        return 1
    return int(policy.compute_threads())


def apply_threads(policy: Any, pace: Pace) -> None:
    """Set the policy's compute threads to what `pace` asks (a no-op without a thread level)."""
    if pace.threads > 1:
        policy.set_compute_threads(pace.use_threads)


def deepest_level(settings: PeerSettings) -> int:
    """The first level at which the questions and both sides of the split are all down to one."""
    most = max(settings.questions_per_round, settings.n_local, settings.n_external)
    level = 0
    while level < MAX_LEVEL and scaled(most, 2.0**-level) > 1:
        level += 1
    return level


GENERATIONS_KEPT = 3
"""Recent generations the expected generation time is taken from."""


@attrs.define
class GenerationTimes:
    """How long this peer's recent generations took, for the round machine's guard: a round
    opened with just over half of it left must still publish before the swarm's collect
    deadline (protocol.rounds.too_late_to_start)."""

    recent: list[tuple[int, int]] = attrs.Factory(list)
    """(milliseconds, questions answered) of the last `GENERATIONS_KEPT` generations."""

    def add(self, generate_s: float | None, questions: int) -> None:
        """One round's generation (None: it did not finish one)."""
        if generate_s is None or questions <= 0:
            return
        self.recent = [*self.recent, (round(generate_s * 1000), questions)][-GENERATIONS_KEPT:]

    def forget_slowest(self, questions: int) -> None:
        """Drop the generation that sets `expected_ms(questions)`: a round skipped by the
        estimate measures nothing, so without this one slow generation would keep a peer that
        gets to every round late out of all of them; with it, the peer plays again within
        `GENERATIONS_KEPT` skipped rounds and measures the present."""
        if self.recent:
            slowest = max(self.recent, key=lambda run: ceil_div(run[0] * max(questions, run[1]), run[1]))
            self.recent = [run for run in self.recent if run is not slowest]

    def expected_ms(self, questions: int) -> int:
        """The slowest recent generation, scaled up to `questions` when they are more, never
        down: part of a generation's time does not shrink with its questions (a batched
        call, the prompt's prefill), and a late batch costs more than a skipped round that
        would just have fit. 0 before any generation."""
        return max((ceil_div(ms * max(questions, asked), asked) for ms, asked in self.recent), default=0)


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def times_of(work: RoundWork) -> RoundTimes:
    return RoundTimes(
        opened_ms=work.opened_ms,
        round_ends_ms=work.round_ends_ms,
        generate_ms=None if work.generate_s is None else round(work.generate_s * 1000),
        train_started_ms=work.train_started_ms,
        train_finished_ms=work.train_finished_ms,
    )
