"""The per-peer round machine: which step of a round a peer is in, driven by (now, event).

Sans-IO in the style of h11's `_state.py`: the machine never reads a clock and never
does IO. The runtime feeds it events together with the current time in integer
milliseconds and carries out the actions it returns. Transitions are data
(`TRANSITIONS`); a (phase, event) pair that is not in the table raises
`IllegalTransition`, because it means the runtime itself is confused.

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

Round-number rules, applied before the table so they are uniform:
- RoundOpened(r) with r <= round is stale or a duplicate: no actions, never goes back.
- RolloutsReady / TrainingFinished / ReportFinished for r < round come from work started
  for a round that was since abandoned: no actions.
- The same events for r > round name a round that was never opened: IllegalTransition.
- Tick carries no round; it only matters in COLLECTING (the collect deadline). If
  RolloutsReady arrives after the deadline, it publishes and the NEXT Tick trains, so
  there is still exactly one Train per round.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

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


@attrs.frozen
class RolloutsReady:
    """Local generation for `round` finished (the batch is ready to publish)."""

    round: int = attrs.field(validator=_non_negative)


@attrs.frozen
class Tick:
    """Time passed; the time itself is handle()'s `now_ms` argument."""


@attrs.frozen
class TrainingFinished:
    round: int = attrs.field(validator=_non_negative)


@attrs.frozen
class ReportFinished:
    round: int = attrs.field(validator=_non_negative)


Event = RoundOpened | RolloutsReady | Tick | TrainingFinished | ReportFinished

# ---- actions ----------------------------------------------------------------------------


@attrs.frozen
class Generate:
    """Derive this round's questions and generate rollouts for them."""

    round: int


@attrs.frozen
class Publish:
    """Publish the local batch (announce + serve fetches) for `round`."""

    round: int


@attrs.frozen
class Train:
    """Sample the training groups from what was collected and run one update."""

    round: int


@attrs.frozen
class Report:
    """Report reward and winners for `round`."""

    round: int


@attrs.frozen
class AbandonRound:
    """`round` was overtaken by a newer one before it finished: drop its pending work."""

    round: int


Action = Generate | Publish | Train | Report | AbandonRound


class IllegalTransition(Exception):
    """An event arrived that the current phase cannot accept; the caller is out of step."""


# ---- the machine ------------------------------------------------------------------------

_Handler = Callable[["RoundMachine", int, Event], tuple[Action, ...]]


def _open_round(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    assert isinstance(event, RoundOpened)
    actions: list[Action] = []
    if machine.phase not in (Phase.IDLE, Phase.DONE):
        actions.append(AbandonRound(machine.round))
    machine.round = event.round
    machine.collect_until_ms = event.collect_until_ms
    machine.round_ends_ms = event.round_ends_ms
    machine.phase = Phase.GENERATING
    actions.append(Generate(event.round))
    return tuple(actions)


def _publish(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    machine.phase = Phase.COLLECTING
    return (Publish(machine.round),)


def _collect_deadline(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    if now_ms < machine.collect_until_ms:
        return ()
    machine.phase = Phase.TRAINING
    return (Train(machine.round),)


def _report(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    machine.phase = Phase.REPORTING
    return (Report(machine.round),)


def _done(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    machine.phase = Phase.DONE
    return ()


def _nothing(machine: RoundMachine, now_ms: int, event: Event) -> tuple[Action, ...]:
    return ()


TRANSITIONS: dict[tuple[Phase, type], _Handler] = {
    **{(phase, RoundOpened): _open_round for phase in Phase},
    **{(phase, Tick): _nothing for phase in Phase if phase is not Phase.COLLECTING},
    (Phase.COLLECTING, Tick): _collect_deadline,
    (Phase.GENERATING, RolloutsReady): _publish,
    (Phase.TRAINING, TrainingFinished): _report,
    (Phase.REPORTING, ReportFinished): _done,
}
"""(phase, event type) -> handler. Anything absent is an IllegalTransition."""


@attrs.define
class RoundMachine:
    """One peer's position in the round cycle. Start with `RoundMachine()` (round -1, IDLE)."""

    round: int = -1
    phase: Phase = Phase.IDLE
    collect_until_ms: int = 0
    round_ends_ms: int = 0

    def handle(self, now_ms: int, event: Event) -> tuple[Action, ...]:
        """Apply `event` at time `now_ms`; returns the actions the runtime must carry out."""
        if isinstance(event, RoundOpened):
            if event.round <= self.round:
                return ()  # stale or duplicate: the machine never goes back
        elif isinstance(event, RolloutsReady | TrainingFinished | ReportFinished):
            if event.round < self.round:
                return ()  # late result of an abandoned round
            if event.round > self.round:
                raise IllegalTransition(
                    f"{type(event).__name__}({event.round}) for a round never opened (current {self.round})"
                )
        handler = TRANSITIONS.get((self.phase, type(event)))
        if handler is None:
            raise IllegalTransition(
                f"{type(event).__name__} is not allowed in phase {self.phase.name} (round {self.round})"
            )
        return handler(self, now_ms, event)
