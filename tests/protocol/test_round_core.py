"""The round machine as the driver uses it: coordinator answers in, open / skip / abandon and
the deadlines out (protocol/rounds.py). A hypothesis state machine drives it with a schedule
coordinator and random delays, against a model written from the rules, not from the code."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.rounds import (
    GUARDS,
    ON_ENTER,
    PASS_THROUGH,
    TRANSITIONS,
    AbandonRound,
    CoordinatorSaid,
    Generate,
    Idle,
    IllegalTransition,
    Phase,
    Publish,
    Report,
    ReportFinished,
    RolloutsReady,
    RoundMachine,
    RoundTiming,
    SkipRound,
    SweepDht,
    Tick,
    Train,
    TrainingFinished,
)

STAGE_MS = 10_000


def said(round_number: int, ends_ms: int | None = None) -> CoordinatorSaid:
    ends = (round_number + 1) * STAGE_MS if ends_ms is None else ends_ms
    return CoordinatorSaid(round_number, 0, 1, ends)


def test_the_next_phase_is_read_from_the_table() -> None:
    assert TRANSITIONS[(Phase.GENERATING, RolloutsReady)] is Phase.COLLECTING
    assert TRANSITIONS[(Phase.COLLECTING, Tick)] is Phase.TRAINING
    assert TRANSITIONS[(Phase.TRAINING, TrainingFinished)] is Phase.REPORTING
    assert TRANSITIONS[(Phase.REPORTING, ReportFinished)] is Phase.DONE
    assert all(TRANSITIONS[(phase, Idle)] is phase for phase in Phase)
    assert set(GUARDS) <= set(TRANSITIONS)
    assert ON_ENTER[Phase.TRAINING](RoundMachine(round=2)) == Train(2)
    assert all((phase, event) in TRANSITIONS for phase, (_, event) in PASS_THROUGH.items())


def test_a_poll_opens_with_deadlines_from_the_timing() -> None:
    machine = RoundMachine(timing=RoundTiming(collect_fraction=0.6, sweep_fraction=0.5))
    assert machine.handle(1_000, said(0)) == (Generate(0),)
    # 9 s left: collect for 60% of it, sweep at half the collect window.
    assert (machine.collect_until_ms, machine.sweep_at_ms, machine.round_ends_ms) == (6_400, 3_700, 10_000)
    assert machine.wake_at_ms(1_000, 60_000) == 3_700  # the sweep comes first
    assert machine.handle(3_699, Idle()) == ()
    assert machine.handle(3_700, Idle()) == (SweepDht(0),)
    assert machine.handle(3_800, Idle()) == ()  # once per round


def test_a_round_with_too_little_left_is_skipped_once_and_the_next_opens() -> None:
    machine = RoundMachine(timing=RoundTiming(min_round_remaining=0.5))
    machine.handle(0, said(0))
    machine.handle(10_000, said(0))  # same round again: nothing, but a second stage end...
    assert machine.stage_ms is None  # ...of the same stage teaches no length
    machine.handle(10_000, RolloutsReady(0))
    assert machine.handle(12_000, said(1)) == (AbandonRound(0), Generate(1))  # 8 s of 10 left
    assert machine.stage_ms == STAGE_MS
    machine.handle(12_001, RolloutsReady(1))
    assert machine.handle(26_000, said(2)) == (SkipRound(2, 0, 4_000),)  # 4 s of 10 left
    assert machine.handle(27_000, said(2)) == ()  # skipped once
    assert machine.current_round() == 2 and machine.round == 1  # work in hand continues
    assert machine.handle(30_000, said(3)) == (AbandonRound(1), Generate(3))


def test_min_round_remaining_zero_never_skips() -> None:
    machine = RoundMachine(timing=RoundTiming(min_round_remaining=0.0))
    machine.handle(0, said(0))
    machine.handle(5_000, said(1))
    assert machine.handle(19_999, said(2)) == (AbandonRound(1), Generate(2))


def test_the_sweep_is_off_when_disabled_and_only_while_collecting() -> None:
    machine = RoundMachine(timing=RoundTiming(dht_sweep=False))
    machine.handle(0, said(0))
    assert machine.handle(9_000, Idle()) == ()
    machine = RoundMachine()
    machine.handle(0, said(0))
    machine.handle(1, RolloutsReady(0))
    machine.handle(6_000, Tick())
    assert machine.phase is Phase.TRAINING
    assert machine.handle(6_001, Idle()) == ()


class ScheduledRounds(RuleBasedStateMachine):
    """A peer polling a fixed schedule (round r ends at (r + 1) * STAGE_MS) at random times,
    finishing its work at random times."""

    def __init__(self) -> None:
        super().__init__()
        self.timing = RoundTiming(collect_fraction=0.6, sweep_fraction=0.5, min_round_remaining=0.5)
        self.machine = RoundMachine(timing=self.timing)
        self.now = 0
        self.polls = 0
        self.opened: list[int] = []
        self.skipped: list[int] = []
        self.trained: list[int] = []
        self.swept: list[int] = []
        self.previous_round = -1

    def feed(self, event: object) -> tuple[object, ...]:
        before = (self.machine.round, self.machine.phase)
        actions = self.machine.handle(self.now, event)  # type: ignore[arg-type]
        for action in actions:
            if isinstance(action, Generate):
                self.opened.append(action.round)
            elif isinstance(action, SkipRound):
                self.skipped.append(action.round)
            elif isinstance(action, Train):
                assert action.round == self.machine.round
                self.trained.append(action.round)
            elif isinstance(action, SweepDht):
                assert before[1] in (Phase.GENERATING, Phase.COLLECTING)
                assert self.now >= self.machine.sweep_at_ms
                self.swept.append(action.round)
            elif isinstance(action, AbandonRound):
                assert action.round == before[0]
                assert before[1] not in (Phase.IDLE, Phase.DONE)
            elif isinstance(action, Publish | Report):
                assert action.round == self.machine.round
        return actions

    @rule(wait=st.integers(0, 2 * STAGE_MS))
    def poll(self, wait: int) -> None:
        self.now += wait
        current = self.now // STAGE_MS
        ends = (current + 1) * STAGE_MS
        before_round = self.machine.round
        knew_length = self.machine.stage_ms is not None or self.polls > 0
        actions = self.feed(said(current, ends))
        self.polls += 1
        if current <= before_round:
            assert actions == ()
            return
        left = ends - self.now
        if any(isinstance(a, Generate) for a in actions):
            # Opened: never with too little left, once the length is known.
            assert not (self.machine.stage_ms is not None and left < 0.5 * self.machine.stage_ms)
            assert self.machine.collect_until_ms == self.now + int(0.6 * left)
            assert self.now <= self.machine.sweep_at_ms <= self.machine.collect_until_ms
        else:
            assert knew_length and self.machine.stage_ms is not None
            assert left < 0.5 * self.machine.stage_ms

    @precondition(lambda self: self.machine.phase is Phase.GENERATING)
    @rule(work=st.integers(0, STAGE_MS))
    def rollouts_ready(self, work: int) -> None:
        self.now += work
        assert self.feed(RolloutsReady(self.machine.round)) == (Publish(self.machine.round),)

    @rule(wait=st.integers(0, STAGE_MS))
    def tick(self, wait: int) -> None:
        self.now += wait
        self.feed(Tick())

    @rule()
    def idle(self) -> None:
        self.feed(Idle())

    @precondition(lambda self: self.machine.phase is Phase.TRAINING)
    @rule(work=st.integers(0, STAGE_MS))
    def training_finished(self, work: int) -> None:
        self.now += work
        self.feed(TrainingFinished(self.machine.round))

    @precondition(lambda self: self.machine.phase is Phase.REPORTING)
    @rule()
    def report_finished(self) -> None:
        self.feed(ReportFinished(self.machine.round))

    @precondition(lambda self: self.machine.round >= 0)
    @rule(kind=st.sampled_from([RolloutsReady, TrainingFinished, ReportFinished]))
    def out_of_phase(self, kind: type) -> None:
        expected_phase = {
            RolloutsReady: Phase.GENERATING,
            TrainingFinished: Phase.TRAINING,
            ReportFinished: Phase.REPORTING,
        }[kind]
        if self.machine.phase is expected_phase:
            return
        before = (self.machine.round, self.machine.phase, self.machine.collect_until_ms)
        with pytest.raises(IllegalTransition):
            self.machine.handle(self.now, kind(self.machine.round))
        assert (self.machine.round, self.machine.phase, self.machine.collect_until_ms) == before

    @invariant()
    def rounds_only_move_forward(self) -> None:
        assert self.machine.round >= self.previous_round
        self.previous_round = self.machine.round
        assert self.opened == sorted(set(self.opened))

    @invariant()
    def skipped_rounds_are_skipped_once_and_never_opened(self) -> None:
        assert len(self.skipped) == len(set(self.skipped))
        assert not set(self.skipped) & set(self.opened)

    @invariant()
    def one_train_and_one_sweep_per_round_at_most(self) -> None:
        assert len(self.trained) == len(set(self.trained))
        assert len(self.swept) == len(set(self.swept))

    @invariant()
    def the_current_round_counts_skips(self) -> None:
        assert self.machine.current_round() == max([-1, *self.opened, *self.skipped])

    @invariant()
    def the_wake_up_is_never_in_the_past(self) -> None:
        assert self.now < self.machine.wake_at_ms(self.now, 1_000) <= self.now + 1_000


ScheduledRounds.TestCase.settings = settings(stateful_step_count=40)
TestScheduledRounds = ScheduledRounds.TestCase


def test_the_stage_length_is_the_smallest_estimate_seen() -> None:
    from protocol.rounds import learn_stage_ms

    assert learn_stage_ms(None, said(0), said(1)) == STAGE_MS
    # A chain stage that nobody advanced lasts longer than its duration: never undercut.
    assert learn_stage_ms(STAGE_MS, said(1), said(2, ends_ms=3 * STAGE_MS + 2_000)) == STAGE_MS
    assert learn_stage_ms(STAGE_MS, said(1), said(3, ends_ms=2 * STAGE_MS + 16_000)) == 8_000
    assert learn_stage_ms(STAGE_MS, said(2), said(1)) == STAGE_MS  # not later: nothing learned


def test_the_idle_wait_ends_at_the_collect_deadline_and_at_the_stage_end() -> None:
    machine = RoundMachine(timing=RoundTiming(dht_sweep=False))
    machine.handle(0, said(0))
    machine.handle(1, RolloutsReady(0))
    assert machine.phase is Phase.COLLECTING
    assert machine.wake_at_ms(100, 60_000) == machine.collect_until_ms == 6_000
    machine.handle(6_000, Tick())
    assert machine.wake_at_ms(7_000, 60_000) == STAGE_MS  # the stage end: poll for the next round
    assert machine.wake_at_ms(7_000, 500) == 7_500


def test_a_round_is_over_at_its_end_and_only_while_in_progress() -> None:
    machine = RoundMachine()
    assert not machine.round_over(10**9)  # IDLE
    machine.handle(0, said(0))
    assert not machine.round_over(STAGE_MS - 1)
    assert machine.round_over(STAGE_MS)
