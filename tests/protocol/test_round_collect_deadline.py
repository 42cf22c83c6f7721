"""The too-late-to-start guard counts a peer's expected generation time against the swarm's
collect deadline: a round is opened only when the peer's batch would be published before the
peers that opened the stage at its start stop taking batches in (unless no start could: then
skipping would only keep it out of every round), and only the share of the stage left or that
deadline ever skip one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.rounds import CoordinatorSaid, Generate, RoundMachine, RoundTiming, SkipRound

fractions = st.integers(1, 99).map(lambda percent: percent / 100)


def opened_or_skipped(
    stage_ms: int, collect_fraction: float, min_remaining: float, generate_ms: int, elapsed_ms: int
) -> tuple[bool, int]:
    """A machine that knows the stage length (published) and expects `generate_ms` of
    generation, polled `elapsed_ms` into stage 0 of round 5: (opened, the swarm's collect
    deadline)."""
    start_ms = 5 * stage_ms
    machine = RoundMachine(
        timing=RoundTiming(collect_fraction=collect_fraction, min_round_remaining=min_remaining),
        expected_generate_ms=generate_ms,
    )
    actions = machine.handle(start_ms + elapsed_ms, CoordinatorSaid(5, 0, 1, start_ms + stage_ms, stage_ms))
    opened = any(isinstance(action, Generate) for action in actions)
    skipped = any(isinstance(action, SkipRound) for action in actions)
    assert opened != skipped  # a new round is always one or the other
    return opened, start_ms + int(collect_fraction * stage_ms)


@given(
    stage_ms=st.integers(1_000, 600_000),
    collect_fraction=fractions,
    min_remaining=fractions,
    generate_share=st.floats(0.001, 1.0),
    elapsed_share=st.floats(0.0, 1.0),
)
def test_a_round_is_opened_only_when_its_batch_would_be_published_before_the_swarm_stops_collecting(
    stage_ms: int, collect_fraction: float, min_remaining: float, generate_share: float, elapsed_share: float
) -> None:
    generate_ms = max(1, int(generate_share * stage_ms))
    elapsed_ms = int(elapsed_share * stage_ms)
    opened, swarm_collect_until_ms = opened_or_skipped(
        stage_ms, collect_fraction, min_remaining, generate_ms, elapsed_ms
    )
    now_ms = 5 * stage_ms + elapsed_ms
    fits_deadline = now_ms + generate_ms < swarm_collect_until_ms
    never_fits = generate_ms >= int(collect_fraction * stage_ms)  # late from any start
    enough_left = stage_ms - elapsed_ms >= min_remaining * stage_ms
    # Opened exactly when both hold: no batch published late that a skip would have kept from
    # being late, no round skipped that fit.
    assert opened == ((fits_deadline or never_fits) and enough_left)


def test_just_over_half_left_is_skipped_when_the_measured_generation_would_publish_at_the_deadline() -> None:
    # 10 s rounds, the swarm collects for 6 s: at 5 s in, 1 s of generation publishes at 6 s,
    # exactly when the others stop collecting (the case the share of the round left missed).
    assert opened_or_skipped(10_000, 0.6, 0.5, 1_000, 5_000) == (False, 56_000)
    assert opened_or_skipped(10_000, 0.6, 0.5, 999, 5_000) == (True, 56_000)
    # Not measured yet (0): the share of the stage left alone decides, as before any round ran.
    assert opened_or_skipped(10_000, 0.6, 0.5, 0, 5_000)[0]
    # A generation longer than the 6 s collect window is late from any start: skipping would
    # keep the peer out of every round, so the share of the stage left decides.
    assert opened_or_skipped(10_000, 0.6, 0.5, 6_000, 5_000)[0]
    assert not opened_or_skipped(10_000, 0.6, 0.5, 6_000, 5_001)[0]
    # 0 turns the guard off altogether, measured generation or not.
    assert opened_or_skipped(10_000, 0.6, 0.0, 9_000, 5_000)[0]


@given(
    generate_before_ms=st.integers(1_001, 5_999),
    generate_after_ms=st.integers(0, 1_000),
    polls_ms=st.lists(st.integers(0, 4_999), min_size=1, max_size=5),
)
def test_a_skipped_round_stays_skipped_when_the_expected_generation_drops_before_it_ends(
    generate_before_ms: int, generate_after_ms: int, polls_ms: list[int]
) -> None:
    # Seen on a busy host: a peer skipped round 9 with 26.7 of 30 s left (its slowest recent
    # generation would publish late), then its pace halved its work, the estimate dropped, and
    # the next poll opened the round it had already recorded as skipped: two records (skipped,
    # then completed) for one round.
    stage_ms, start_ms = 10_000, 50_000
    machine = RoundMachine(
        timing=RoundTiming(collect_fraction=0.6, min_round_remaining=0.5),
        expected_generate_ms=generate_before_ms,
    )
    said = CoordinatorSaid(5, 0, 1, start_ms + stage_ms, stage_ms)
    first = machine.handle(start_ms + 5_000, said)
    assert any(isinstance(action, SkipRound) for action in first)
    machine.expected_generate_ms = generate_after_ms
    for offset in sorted(polls_ms):
        assert machine.handle(start_ms + 5_000 + offset, said) == ()
    assert machine.current_round() == 5
    # The next round opens as usual.
    after = machine.handle(start_ms + stage_ms, CoordinatorSaid(6, 0, 1, start_ms + 2 * stage_ms, stage_ms))
    assert any(isinstance(action, Generate) for action in after)


@given(
    stage_ms=st.integers(1_000, 600_000),
    collect_fraction=fractions,
    min_remaining=fractions,
    generate_share=st.floats(0.0, 1.0),
    elapsed_share=st.floats(0.0, 1.0),
)
def test_a_skip_says_whether_the_expected_generation_alone_kept_the_peer_out(
    stage_ms: int, collect_fraction: float, min_remaining: float, generate_share: float, elapsed_share: float
) -> None:
    # The driver forgets its slowest generation on such a skip (a skipped round measures none):
    # told wrongly, a share-skip would wear the estimate down, or a peer would never re-measure.
    elapsed_ms = int(elapsed_share * stage_ms)
    start_ms = 5 * stage_ms
    machine = RoundMachine(
        timing=RoundTiming(collect_fraction=collect_fraction, min_round_remaining=min_remaining),
        expected_generate_ms=int(generate_share * stage_ms),
    )
    actions = machine.handle(start_ms + elapsed_ms, CoordinatorSaid(5, 0, 1, start_ms + stage_ms, stage_ms))
    skips = [action for action in actions if isinstance(action, SkipRound)]
    if skips:
        enough_left = stage_ms - elapsed_ms >= min_remaining * stage_ms
        assert skips[0].for_generation == enough_left
        assert skips[0].left_ms == stage_ms - elapsed_ms
