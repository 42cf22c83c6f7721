"""The pace rule (swarmp2p/round_pace.py) on its own: verdicts from a round's timings, and
levels that move only after a run of the same verdict, within [0, MAX_LEVEL]."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from swarmp2p.peer_settings import PeerSettings
from swarmp2p.round_pace import (
    GENERATIONS_KEPT,
    MAX_LEVEL,
    STREAK,
    GenerationTimes,
    Pace,
    RoundTimes,
    Verdict,
    deepest_level,
    judge,
    scaled,
)

OVERRAN = RoundTimes(0, 10_000, 1_000, 6_000, 12_000)
TIGHT = RoundTimes(0, 10_000, 1_000, 6_000, 9_000)  # 1 s left, 4 s of work
ROOMY = RoundTimes(0, 10_000, 500, 6_000, 7_000)  # 3 s left, 1.5 s of work
NOT_TRAINED = RoundTimes(0, 10_000, 9_000, None, None)  # abandoned before its training step

BY_VERDICT = {Verdict.OVERRAN: OVERRAN, Verdict.TIGHT: TIGHT, Verdict.ROOMY: ROOMY}


def test_verdicts() -> None:
    assert judge(OVERRAN, 2.0) is Verdict.OVERRAN
    assert judge(NOT_TRAINED, 2.0) is Verdict.OVERRAN
    assert judge(TIGHT, 2.0) is Verdict.TIGHT
    assert judge(ROOMY, 2.0) is Verdict.ROOMY
    assert judge(TIGHT, 1.0) is Verdict.ROOMY  # at full work any round that fits has room


def test_one_overrun_changes_nothing_and_a_fitting_round_breaks_the_run() -> None:
    pace = Pace()
    assert pace.observe(0, OVERRAN) is None
    assert pace.observe(1, ROOMY) is None
    assert pace.observe(2, OVERRAN) is None and pace.level == 0
    line = pace.observe(3, OVERRAN)
    assert line == "generate + train overran 2 rounds in a row"
    assert (pace.level, pace.share, pace.since_round) == (1, 0.5, 4)


def test_it_goes_back_up_only_after_rounds_with_room_for_twice_the_work() -> None:
    pace = Pace(level=2)
    for r in range(STREAK[Verdict.ROOMY] - 1):
        assert pace.observe(r, ROOMY) is None
    assert pace.observe(9, TIGHT) is None  # the run is broken
    for r in range(STREAK[Verdict.ROOMY]):
        pace.observe(10 + r, ROOMY)
    assert pace.level == 1


@given(st.lists(st.sampled_from(list(BY_VERDICT)), max_size=60))
def test_the_level_stays_in_bounds_and_moves_one_step_at_a_time(verdicts: list[Verdict]) -> None:
    pace = Pace()
    for r, verdict in enumerate(verdicts):
        before = pace.level
        changed = pace.observe(r, BY_VERDICT[verdict])
        assert 0 <= pace.level <= MAX_LEVEL
        assert abs(pace.level - before) <= 1
        assert (changed is not None) == (pace.level != before)


@given(st.integers(0, 64), st.integers(0, MAX_LEVEL))
def test_scaled_counts_keep_a_side_on_or_off(count: int, level: int) -> None:
    share = 2.0**-level
    got = scaled(count, share)
    assert (got == 0) == (count == 0)
    assert got <= count and got >= count * share


def test_own_questions_are_a_prefix_of_the_assigned() -> None:
    assert Pace(level=1).own_questions(("a", "b", "c")) == ("a", "b")
    assert Pace(level=3).own_questions(("a", "b", "c")) == ("a",)
    assert Pace().own_questions(("a", "b", "c")) == ("a", "b", "c")


def test_the_deepest_level_is_where_every_count_is_one() -> None:
    defaults = PeerSettings(swarm_id="s", seed=1, tasks=("echo",))  # 4 questions, 4 + 4 groups
    assert deepest_level(defaults) == 2
    assert (
        deepest_level(
            PeerSettings(
                swarm_id="s", seed=1, tasks=("echo",), questions_per_round=1, n_local=1, n_external=1
            )
        )
        == 0
    )
    pace = Pace(level=2)
    assert pace.observe(0, OVERRAN, deepest=2) is None
    assert pace.observe(1, OVERRAN, deepest=2) is None and pace.level == 2  # nothing less to do


def test_the_expected_generation_is_the_slowest_recent_one_scaled_up_never_down() -> None:
    times = GenerationTimes()
    assert times.expected_ms(4) == 0  # nothing measured: the guard goes by the share left alone
    times.add(None, 4)  # a round abandoned before its generation finished says nothing
    times.add(2.0, 0)
    assert times.expected_ms(4) == 0
    times.add(2.0, 4)
    assert times.expected_ms(4) == 2_000
    assert times.expected_ms(8) == 4_000  # twice the questions: twice the time
    assert times.expected_ms(1) == 2_000  # a quarter of them: not assumed faster
    times.add(0.3, 1)
    assert times.expected_ms(2) == 2_000  # the slowest of the recent ones
    times.add(0.3, 1)
    times.add(0.3, 1)  # three newer generations: the 2 s one is no longer recent
    assert times.expected_ms(2) == 600


@given(
    runs=st.lists(st.tuples(st.floats(0.001, 100.0), st.integers(1, 64)), min_size=1, max_size=8),
    questions=st.integers(1, 64),
)
def test_the_expected_generation_never_undercuts_a_recent_one(
    runs: list[tuple[float, int]], questions: int
) -> None:
    times = GenerationTimes()
    for seconds, asked in runs:
        times.add(seconds, asked)
    recent = [(round(seconds * 1000), asked) for seconds, asked in runs[-GENERATIONS_KEPT:]]
    expected = times.expected_ms(questions)
    assert expected >= max(ms for ms, _ in recent)
    assert expected >= max(ms * questions / asked for ms, asked in recent)  # at this many questions
