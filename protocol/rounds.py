"""The per-peer round machine: which step of a round a peer is in, driven by (now, event).

Sans-IO in the style of h11's `_state.py`: the machine never reads a clock and never
does IO. The runtime feeds it events together with the current time in integer
milliseconds and carries out the actions it returns. Transitions are data: the next
phase for any (phase, event type) is read from `TRANSITIONS`; a pair that is not in the
table raises `IllegalTransition`, because it means the runtime itself is confused.
Entering a phase emits that phase's action (`ON_ENTER`).

    RoundOpened(r)           RolloutsReady(r)           Tick, now >= collect_until_ms
  IDLE ─────────────► GENERATING ────────────► COLLECTING ─────────────────────────► TRAINING
  (round -1)           emits Generate(r)        emits Publish(r)                    emits Train(r)
                                                                                        │
                                                                     TrainingFinished(r)│
                                                                     emits Report(r)    ▼
                                     ReportFinished(r)                              REPORTING
                               DONE ◄────────────────────────────────────────────────────┘

  From ANY phase, RoundOpened(r') with r' > round jumps straight to GENERATING for r'
  (catch-up never replays skipped rounds) and, when the old round was still in progress
  (neither IDLE nor DONE), first emits AbandonRound(old).

Decisions the machine makes before the table (`CoordinatorSaid`, the answer of one poll of
the coordinator): it takes the stage length the coordinator publishes, or else learns it from
successive answers, and a newer round
either opens (a RoundOpened with the deadlines the machine computes from `RoundTiming`:
collect, DHT sweep, round end) or, when too little of its stage is left to be worth
starting, is skipped once (`SkipRound`; the phase is left alone, so work in hand finishes
and the next round opens on time).

Round-number rules, applied before the table so they are uniform:
- RoundOpened(r) with r <= round is stale or a duplicate: no actions, never goes back.
- RolloutsReady / TrainingFinished / ReportFinished for r < round come from work started
  for a round that was since abandoned: no actions.
- The same events for r > round name a round that was never opened: IllegalTransition.
- Tick carries no round; it only matters in COLLECTING (the collect deadline, `GUARDS`). If
  RolloutsReady arrives after the deadline, it publishes and the NEXT Tick trains, so
  there is still exactly one Train per round.
- Idle (the runtime ran out of work and is about to sleep) changes no phase; in GENERATING
  or COLLECTING past the sweep deadline it emits SweepDht(r), once per round.

Stages: the machine takes what it needs of the game from its registry row
(protocol/games.py `GameSpec.plan`, a `StagePlan`). In a game of several stages it orders
POSITIONS (round, stage), compared as tuples, and "round" above reads "position" everywhere;
in a one-stage game a round is one cycle whatever the coordinator's stage count. A multi-stage
game opens one (round, stage) after another through the same table, each a full cycle
(generate, publish, collect, train, report). A stage the plan does not train passes TRAINING
through (`PASS_THROUGH`: COLLECTING -> REPORTING, no Train), and `Report` says whether its
stage is the one that votes. Events and actions carry the stage (default 0).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs


class Phase(enum.Enum):
    IDLE = "idle"
    GENERATING = "generating"
    COLLECTING = "collecting"
    TRAINING = "training"
    REPORTING = "reporting"
    DONE = "done"


def _non_negative(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


# ---- events -----------------------------------------------------------------------------


@attrs.frozen
class RoundOpened:
    """The coordinator (or schedule) says `round` is the current round."""

    round: int = attrs.field(validator=_non_negative)
    collect_until_ms: int = attrs.field(validator=_non_negative)
    round_ends_ms: int = attrs.field(validator=_non_negative)
    stage: int = attrs.field(default=0, validator=_non_negative)
    sweep_at_ms: int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class CoordinatorSaid:
    """One answer of the coordinator: round `round`, stage `stage` of `stage_count`, ending at
    `stage_ends_ms`. Not validated: whatever a coordinator says must never crash a peer; a
    round that is not newer is simply not opened."""

    round: int
    stage: int
    stage_count: int
    stage_ends_ms: int
    stage_ms: int = 0
    """The stage length the coordinator publishes (a contract's stageDuration); 0 when it
    publishes none: the machine then learns it from successive answers."""


@attrs.frozen
class RolloutsReady:
    """Local generation for `round` finished (the batch is ready to publish)."""

    round: int = attrs.field(validator=_non_negative)
    stage: int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class Tick:
    """Time passed; the time itself is handle()'s `now_ms` argument."""


@attrs.frozen
class Idle:
    """The runtime carried out every action it had and is about to sleep."""


@attrs.frozen
class TrainingFinished:
    round: int = attrs.field(validator=_non_negative)
    stage: int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class ReportFinished:
    round: int = attrs.field(validator=_non_negative)
    stage: int = attrs.field(default=0, validator=_non_negative)


Event = RoundOpened | CoordinatorSaid | RolloutsReady | Tick | Idle | TrainingFinished | ReportFinished

# ---- actions ----------------------------------------------------------------------------


@attrs.frozen
class Generate:
    """Derive this round's questions and generate rollouts for them."""

    round: int
    stage: int = 0


@attrs.frozen
class Publish:
    """Publish the local batch (announce + serve fetches) for `round`."""

    round: int
    stage: int = 0


@attrs.frozen
class Train:
    """Sample the training groups from what was collected and run one update."""

    round: int
    stage: int = 0


@attrs.frozen
class Report:
    """Report the reward of `round`; with `votes` (the game's voting stage, once a round) also
    the winners, then the held-out evaluation when it is due."""

    round: int
    stage: int = 0
    votes: bool = True


@attrs.frozen
class AbandonRound:
    """`round` was overtaken by a newer one before it finished: drop its pending work."""

    round: int
    stage: int = 0


@attrs.frozen
class SkipRound:
    """`round` is left out: only `left_ms` of its stage remained when the peer got to it.
    `for_generation`: the share left was enough, the peer's expected generation was not (it
    would have published after the swarm's collect deadline)."""

    round: int
    stage: int
    left_ms: int
    for_generation: bool = False


@attrs.frozen
class SweepDht:
    """Look up in the DHT the batches of known peers that announced nothing this round."""

    round: int
    stage: int = 0


Action = Generate | Publish | Train | Report | AbandonRound | SkipRound | SweepDht


class IllegalTransition(Exception):
    """An event arrived that the current phase cannot accept; the caller is out of step."""


# ---- the table --------------------------------------------------------------------------

TRANSITIONS: dict[tuple[Phase, type], Phase] = {
    **{(phase, RoundOpened): Phase.GENERATING for phase in Phase},
    **{(phase, Tick): phase for phase in Phase if phase is not Phase.COLLECTING},
    (Phase.COLLECTING, Tick): Phase.TRAINING,
    **{(phase, Idle): phase for phase in Phase},
    (Phase.GENERATING, RolloutsReady): Phase.COLLECTING,
    (Phase.TRAINING, TrainingFinished): Phase.REPORTING,
    (Phase.REPORTING, ReportFinished): Phase.DONE,
}
"""(phase, event type) -> next phase. Anything absent is an IllegalTransition."""

_Guard = Callable[["RoundMachine", int], bool]

GUARDS: dict[tuple[Phase, type], _Guard] = {
    (Phase.COLLECTING, Tick): lambda machine, now_ms: now_ms >= machine.collect_until_ms,
}
"""A transition whose guard is false is taken as a self-loop with no actions (not illegal):
a Tick before the collect deadline is simply early."""

ON_ENTER: dict[Phase, Callable[[RoundMachine], Action]] = {
    Phase.GENERATING: lambda machine: Generate(machine.round, machine.stage),
    Phase.COLLECTING: lambda machine: Publish(machine.round, machine.stage),
    Phase.TRAINING: lambda machine: Train(machine.round, machine.stage),
    Phase.REPORTING: lambda machine: Report(machine.round, machine.stage, machine.plan.votes(machine.stage)),
}
"""The action emitted on entering a phase (from another phase, or a newly opened round)."""

PASS_THROUGH: dict[Phase, tuple[Callable[[RoundMachine], bool], type]] = {
    Phase.TRAINING: (lambda machine: not machine.plan.trains(machine.stage), TrainingFinished),
}
"""A phase entered while its predicate holds is left at once, as if the event beside it had
arrived, and emits nothing: a stage the game does not train goes from COLLECTING straight to
REPORTING."""

IN_PROGRESS = frozenset({Phase.GENERATING, Phase.COLLECTING, Phase.TRAINING, Phase.REPORTING})
"""Phases a newer round abandons (emitting AbandonRound for the old one)."""

COLLECTING_PHASES = frozenset({Phase.GENERATING, Phase.COLLECTING})
"""Phases in which peers' batches for the round are still taken in."""


# ---- timing rules -----------------------------------------------------------------------


def _fraction(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


@attrs.frozen
class RoundTiming:
    """How the machine turns a stage end into deadlines (shares of what is left of the stage
    when the round opens here)."""

    collect_fraction: float = attrs.field(default=0.6, validator=_fraction)
    sweep_fraction: float = attrs.field(default=0.5, validator=_fraction)
    """At this share of the collect window, sweep the DHT for batches we heard nothing of."""
    min_round_remaining: float = attrs.field(default=0.5, validator=_fraction)
    """Skip a round with less than this share of its stage left (0: never skip)."""
    dht_sweep: bool = True


@attrs.frozen
class StagePlan:
    """What the machine takes from the game's registry row: how many stages a round has, which
    of them train and which one votes. The default is the one-stage game."""

    stage_count: int = 1
    train_stages: frozenset[int] = frozenset({0})
    vote_stage: int = 0

    @property
    def staged(self) -> bool:
        """Each stage of a round is a cycle of its own: see `RoundMachine._at`."""
        return self.stage_count > 1

    def trains(self, stage: int) -> bool:
        # A one-stage game plays a round once, in whichever stage of the coordinator it opened.
        return stage in self.train_stages if self.staged else True

    def votes(self, stage: int) -> bool:
        return stage == self.vote_stage if self.staged else True


def learn_stage_ms(known_ms: int | None, earlier: Any, later: Any) -> int | None:
    """The stage length implied by two coordinator answers (anything with round, stage,
    stage_count, stage_ends_ms), combined with what was known.

    k stages apart, the stage ends are k stage lengths apart. The minimum over observations is
    kept: a chain coordinator's stage can outlast its duration (nobody advanced it yet), never
    undercut it, so the smallest estimate is the closest."""
    stages_apart = (later.round - earlier.round) * later.stage_count + (later.stage - earlier.stage)
    if stages_apart <= 0 or later.stage_count != earlier.stage_count:
        return known_ms
    estimate = (later.stage_ends_ms - earlier.stage_ends_ms) // stages_apart
    if estimate <= 0:
        return known_ms
    return estimate if known_ms is None else min(known_ms, estimate)


def too_late_to_start(
    now_ms: int,
    stage_ends_ms: int,
    stage_ms: int | None,
    min_remaining: float,
    *,
    generate_ms: int = 0,
    collect_fraction: float = 1.0,
) -> bool:
    """Whether a round whose stage ends at `stage_ends_ms` is too late to start at `now_ms`
    (never, while the stage length is unknown or `min_remaining` is 0): less than
    `min_remaining` of a `stage_ms`-long stage is left, or a peer whose generation is expected
    to take `generate_ms` (measured; 0: not known) would publish at or after the swarm's
    collect deadline, `collect_fraction` of the stage in, where the peers that opened the
    stage at its start stop taking batches in. The share alone lets a peer that opens with
    just over half the stage left publish after that deadline when its generation is slow.
    A generation that outlasts the whole collect window publishes late from any start:
    skipping for it would keep the peer from ever playing (and from measuring a faster
    generation), so the share alone decides then."""
    if stage_ms is None or min_remaining <= 0:
        return False
    if stage_ends_ms - now_ms < min_remaining * stage_ms:
        return True
    collect_ms = int(collect_fraction * stage_ms)
    fits_from_the_start = 0 < generate_ms < collect_ms
    return fits_from_the_start and now_ms + generate_ms >= stage_ends_ms - stage_ms + collect_ms


# ---- the machine ------------------------------------------------------------------------


@attrs.define
class RoundMachine:
    """One peer's position in the round cycle. Start with `RoundMachine()` (round -1, IDLE)."""

    round: int = -1
    phase: Phase = Phase.IDLE
    collect_until_ms: int = 0
    round_ends_ms: int = 0
    stage: int = 0
    sweep_at_ms: int = 0
    swept: bool = False
    timing: RoundTiming = attrs.field(factory=RoundTiming)
    plan: StagePlan = attrs.field(factory=StagePlan)
    stage_ms: int | None = None
    """The stage length learned from the coordinator's stage ends (`learn_stage_ms`)."""
    last_said: CoordinatorSaid | None = None
    skipped_round: int = -1
    """The newest round skipped for lack of time..."""
    skipped_stage: int = 0
    """...and its stage."""
    expected_generate_ms: int = 0
    """How long the driver expects its next generation to take (0: not known), measured over
    its recent rounds: a round it would publish late is skipped (`too_late_to_start`)."""

    def handle(self, now_ms: int, event: Event) -> tuple[Action, ...]:
        """Apply `event` at time `now_ms`; returns the actions the runtime must carry out."""
        if isinstance(event, CoordinatorSaid):
            return self._coordinator_said(now_ms, event)
        if isinstance(event, RoundOpened):
            if self._at(event.round, event.stage) <= self._at(self.round, self.stage):
                return ()  # stale or duplicate: the machine never goes back
        elif isinstance(event, RolloutsReady | TrainingFinished | ReportFinished):
            position = self._at(event.round, event.stage)
            if position < self._at(self.round, self.stage):
                return ()  # late result of an abandoned round (or stage)
            if position > self._at(self.round, self.stage):
                raise IllegalTransition(
                    f"{type(event).__name__}{position} for a round never opened "
                    f"(current {(self.round, self.stage)})"
                )
        key = (self.phase, type(event))
        after = TRANSITIONS.get(key)
        if after is None:
            raise IllegalTransition(
                f"{type(event).__name__} is not allowed in phase {self.phase.name} (round {self.round})"
            )
        guard = GUARDS.get(key)
        if guard is not None and not guard(self, now_ms):
            return ()
        actions: list[Action] = []
        if isinstance(event, RoundOpened):
            if self.phase in IN_PROGRESS:
                actions.append(AbandonRound(self.round, self.stage))
            self.round = event.round
            self.stage = event.stage
            self.collect_until_ms = event.collect_until_ms
            self.round_ends_ms = event.round_ends_ms
            self.sweep_at_ms = event.sweep_at_ms
            self.swept = False
        elif isinstance(event, Idle):
            if self._sweep_due(now_ms):
                self.swept = True
                actions.append(SweepDht(self.round, self.stage))
            return tuple(actions)
        entering = after is not self.phase or isinstance(event, RoundOpened)
        while entering and after in PASS_THROUGH and PASS_THROUGH[after][0](self):
            after = TRANSITIONS[(after, PASS_THROUGH[after][1])]
        self.phase = after
        if entering and after in ON_ENTER:
            actions.append(ON_ENTER[after](self))
        return tuple(actions)

    def _coordinator_said(self, now_ms: int, said: CoordinatorSaid) -> tuple[Action, ...]:
        previous, self.last_said = self.last_said, said
        if isinstance(said.stage_ms, int) and said.stage_ms > 0:
            # Published: known from the first answer, where learning needs two (a node joining
            # late into its first round could not tell it was too late to start it).
            self.stage_ms = said.stage_ms
        elif previous is not None:
            self.stage_ms = learn_stage_ms(self.stage_ms, previous, said)
        if self._at(said.round, said.stage) <= self._at(self.round, self.stage):
            return ()
        if self._at(said.round, said.stage) <= self._at(self.skipped_round, self.skipped_stage):
            # Polls see a skipped round again until it ends: it was recorded as skipped once and
            # stays so, even where a lower expected generation (the pace cut the work) would
            # now let it start.
            return ()
        timing = self.timing
        if too_late_to_start(
            now_ms,
            said.stage_ends_ms,
            self.stage_ms,
            timing.min_round_remaining,
            generate_ms=self.expected_generate_ms,
            collect_fraction=timing.collect_fraction,
        ):
            self.skipped_round, self.skipped_stage = said.round, said.stage
            left_ms = said.stage_ends_ms - now_ms
            by_share = too_late_to_start(
                now_ms, said.stage_ends_ms, self.stage_ms, timing.min_round_remaining
            )
            return (SkipRound(said.round, said.stage, left_ms, for_generation=not by_share),)
        remaining = max(0, said.stage_ends_ms - now_ms)
        collect_until = now_ms + int(timing.collect_fraction * remaining)
        opened = RoundOpened(
            said.round,
            collect_until,
            max(said.stage_ends_ms, collect_until),
            stage=said.stage,
            sweep_at_ms=now_ms + int(timing.sweep_fraction * (collect_until - now_ms)),
        )
        return self.handle(now_ms, opened)

    def _sweep_due(self, now_ms: int) -> bool:
        return (
            self.timing.dht_sweep
            and self.round >= 0
            and not self.swept
            and now_ms >= self.sweep_at_ms
            and self.phase in COLLECTING_PHASES
        )

    # ---- queries the runtime asks (pure) ------------------------------------------------

    def collecting(self, round_number: int, stage: int = 0) -> bool:
        """Whether batches for (`round_number`, `stage`) are still taken in."""
        return self.round == round_number and self.stage == stage and self.phase in COLLECTING_PHASES

    def current_round(self) -> int:
        """The round inbound messages are judged against: a skipped round counts as current
        (the round after it is the next one this peer will open)."""
        return max(self.round, self.skipped_round)

    def current_position(self) -> tuple[int, int]:
        """`current_round`, with its stage: (round, stage) of the newer of the open and the
        skipped position."""
        if not self.plan.staged:
            # `_at` is (round, 0) here: the same max without building four tuples (this runs
            # for every announcement delivered).
            newer = self.round if self.round >= self.skipped_round else self.skipped_round
            return (newer, 0)
        return max(self._at(self.round, self.stage), self._at(self.skipped_round, self.skipped_stage))

    def _at(self, round_number: int, stage: int) -> tuple[int, int]:
        """A position as this machine orders it: (round, stage) when each stage is a cycle of
        its own (`StagePlan.staged`, a multi-stage game); else (round, 0): a round is one
        cycle, opened in whichever stage it is first seen, as before games had stages (a
        single-stage game on a chain contract of 2 stages still plays once a round)."""
        return (round_number, stage if self.plan.staged else 0)

    def round_over(self, now_ms: int) -> bool:
        """Our work outlasted the round in progress: a newer round should abandon it now."""
        ends = self.round_ends_ms
        return self.phase is not Phase.IDLE and ends > 0 and now_ms >= ends

    def wake_at_ms(self, now_ms: int, poll_interval_ms: int) -> int:
        """When the runtime should next poll: the poll interval, cut short by the collect
        deadline, the end of the coordinator's stage and the pending DHT sweep."""
        wake_at = now_ms + poll_interval_ms
        if self.phase is Phase.COLLECTING:
            wake_at = min(wake_at, self.collect_until_ms)
        said = self.last_said
        if said is not None and said.stage_ends_ms >= now_ms:
            wake_at = min(wake_at, said.stage_ends_ms)
        if self.timing.dht_sweep and self.round >= 0 and not self.swept and self.sweep_at_ms > now_ms:
            wake_at = min(wake_at, self.sweep_at_ms)
        return max(now_ms + 1, wake_at)
