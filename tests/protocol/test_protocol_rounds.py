"""The round machine: scripted walks, the transition table, and a rule-based model check."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.rounds import (
    TRANSITIONS,
    AbandonRound,
    Generate,
    IllegalTransition,
    Phase,
    Publish,
    Report,
    ReportFinished,
    RolloutsReady,
    RoundMachine,
    RoundOpened,
    Tick,
    Train,
    TrainingFinished,
)

EVENT_TYPES = (RoundOpened, RolloutsReady, Tick, TrainingFinished, ReportFinished)


def opened(round_: int, collect_until_ms: int = 100, round_ends_ms: int = 200) -> RoundOpened:
    return RoundOpened(round=round_, collect_until_ms=collect_until_ms, round_ends_ms=round_ends_ms)


def test_a_full_round():
    machine = RoundMachine()
    assert (machine.round, machine.phase) == (-1, Phase.IDLE)
    assert machine.handle(0, opened(0)) == (Generate(0),)
    assert machine.phase is Phase.GENERATING
    assert (machine.collect_until_ms, machine.round_ends_ms) == (100, 200)
    assert machine.handle(10, RolloutsReady(0)) == (Publish(0),)
    assert machine.phase is Phase.COLLECTING
    assert machine.handle(99, Tick()) == ()
    assert machine.handle(100, Tick()) == (Train(0),)
    assert machine.handle(101, Tick()) == ()
    assert machine.handle(150, TrainingFinished(0)) == (Report(0),)
    assert machine.handle(160, ReportFinished(0)) == ()
    assert machine.phase is Phase.DONE
    assert machine.handle(300, opened(1, 400, 500)) == (Generate(1),)  # finished round: nothing to abandon


def test_late_rollouts_publish_then_train_on_next_tick():
    machine = RoundMachine()
    machine.handle(0, opened(0))
    assert machine.handle(150, Tick()) == ()  # still generating: the deadline cannot train yet
    assert machine.handle(160, RolloutsReady(0)) == (Publish(0),)
    assert machine.handle(161, Tick()) == (Train(0),)
    assert machine.handle(162, Tick()) == ()


def test_catch_up_abandons_and_jumps_to_the_newest_round():
    machine = RoundMachine()
    machine.handle(0, opened(2))
    machine.handle(1, RolloutsReady(2))
    assert machine.handle(5, opened(9)) == (AbandonRound(2), Generate(9))
    assert (machine.round, machine.phase) == (9, Phase.GENERATING)
    # Late results of the abandoned round are ignored, stale opens too.
    assert machine.handle(6, RolloutsReady(2)) == ()
    assert machine.handle(6, TrainingFinished(2)) == ()
    assert machine.handle(6, ReportFinished(2)) == ()
    assert machine.handle(6, opened(9)) == ()
    assert machine.handle(6, opened(3)) == ()
    assert machine.round == 9


def test_events_for_unopened_rounds_and_out_of_phase_events_raise():
    machine = RoundMachine()
    with pytest.raises(IllegalTransition):
        machine.handle(0, RolloutsReady(0))  # IDLE
    machine.handle(0, opened(1))
    with pytest.raises(IllegalTransition):
        machine.handle(0, RolloutsReady(2))  # never opened
    with pytest.raises(IllegalTransition):
        machine.handle(0, TrainingFinished(1))  # not training
    machine.handle(0, RolloutsReady(1))
    with pytest.raises(IllegalTransition):
        machine.handle(0, RolloutsReady(1))  # twice
    with pytest.raises(IllegalTransition):
        machine.handle(0, ReportFinished(1))


def test_transition_table_is_the_whole_truth():
    # Every (phase, event type) absent from the table raises, in a round that matches the event.
    for phase in Phase:
        for event_type in EVENT_TYPES:
            machine = RoundMachine(round=4, phase=phase, collect_until_ms=0, round_ends_ms=10)
            event = {
                RoundOpened: opened(5),
                RolloutsReady: RolloutsReady(4),
                Tick: Tick(),
                TrainingFinished: TrainingFinished(4),
                ReportFinished: ReportFinished(4),
            }[event_type]
            if (phase, event_type) in TRANSITIONS:
                machine.handle(0, event)
            else:
                with pytest.raises(IllegalTransition):
                    machine.handle(0, event)
                assert (machine.round, machine.phase) == (4, phase)  # a refused event changes nothing


def test_events_validate_their_rounds():
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError):
            RolloutsReady(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RoundOpened(round=0, collect_until_ms=-5, round_ends_ms=0)


def expected_actions(phase: Phase, round_: int, collect_until_ms: int, now_ms: int, event) -> tuple | None:
    """The brief's semantics written independently of the table; None means illegal."""
    if isinstance(event, RoundOpened):
        if event.round <= round_:
            return ()
        abandon = (AbandonRound(round_),) if phase not in (Phase.IDLE, Phase.DONE) else ()
        return (*abandon, Generate(event.round))
    if isinstance(event, Tick):
        return (Train(round_),) if phase is Phase.COLLECTING and now_ms >= collect_until_ms else ()
    if event.round < round_:
        return ()
    if event.round > round_:
        return None
    if isinstance(event, RolloutsReady):
        return (Publish(round_),) if phase is Phase.GENERATING else None
    if isinstance(event, TrainingFinished):
        return (Report(round_),) if phase is Phase.TRAINING else None
    return () if phase is Phase.REPORTING else None


class RoundMachineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = RoundMachine()
        self.now_ms = 0
        self.trained: list[int] = []
        self.highest_opened = -1
        self.previous_round = -1

    def step(self, event) -> None:
        before = (self.machine.phase, self.machine.round, self.machine.collect_until_ms)
        expected = expected_actions(before[0], before[1], before[2], self.now_ms, event)
        if expected is None:
            with pytest.raises(IllegalTransition):
                self.machine.handle(self.now_ms, event)
            assert (self.machine.phase, self.machine.round, self.machine.collect_until_ms) == before
            return
        actions = self.machine.handle(self.now_ms, event)
        assert actions == expected
        for action in actions:
            if isinstance(action, Publish | Train | Report):
                assert action.round == self.machine.round  # never acts for a round it is not in
            if isinstance(action, Train):
                self.trained.append(action.round)
        if isinstance(event, RoundOpened):
            self.highest_opened = max(self.highest_opened, event.round)

    @rule(jump=st.integers(-2, 3), collect_after=st.integers(0, 50), round_after=st.integers(0, 100))
    def open_round(self, jump, collect_after, round_after):
        target = max(0, self.machine.round + jump)
        collect_until = self.now_ms + collect_after
        self.step(RoundOpened(target, collect_until, collect_until + round_after))

    @rule(offset=st.integers(-1, 1))
    def rollouts_ready(self, offset):
        self.step(RolloutsReady(max(0, self.machine.round + offset)))

    @rule(advance=st.integers(0, 60))
    def tick(self, advance):
        self.now_ms += advance
        self.step(Tick())

    @precondition(lambda self: self.machine.round >= 0)
    @rule(offset=st.integers(-1, 1))
    def training_finished(self, offset):
        self.step(TrainingFinished(max(0, self.machine.round + offset)))

    @precondition(lambda self: self.machine.round >= 0)
    @rule(offset=st.integers(-1, 1))
    def report_finished(self, offset):
        self.step(ReportFinished(max(0, self.machine.round + offset)))

    @invariant()
    def round_never_decreases(self):
        assert self.machine.round >= self.previous_round
        self.previous_round = self.machine.round

    @invariant()
    def at_most_one_train_per_round(self):
        assert len(self.trained) == len(set(self.trained))

    @invariant()
    def sits_on_the_newest_opened_round(self):
        assert self.machine.round == self.highest_opened
        assert (self.machine.phase is Phase.IDLE) == (self.machine.round == -1)


RoundMachineModel.TestCase.settings = settings(stateful_step_count=30)
TestRoundMachineModel = RoundMachineModel.TestCase
