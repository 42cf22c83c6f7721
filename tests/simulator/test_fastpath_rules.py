"""The admission rules are written once: the simulator's fast path decides what they decide.

`simulator.fastpath.heard_run` (its C loop and its Python fallback) decides the common case of
a run of announcements itself, on the simulator's numbered maps and shared opens, and hands the
rest back (SLOW) to `Inbox.heard`. The property below runs random message streams (senders,
rounds, stages, sizes around the batch bound, good and bad signatures, relayed messages,
duplicates, equivocations, garbage, oversized envelopes) into two inboxes with the same rules
and state: a reference that takes every message through `Inbox.heard` -> `consider` on plain
dicts, and one that takes each instant's run through `heard_run` first. Every message must get
the same decision (a deferral, which the fast path does not yield, must be a `Defer` on the
reference side, and the deferred entries kept, priorities included, must be equal), and after
every instant the inboxes' state and their VerifyCaches' counters must be equal. Between
instants peers are banned and the connected peers change (the simulator's shared view against
a node's frozenset).

A rule changed on one side alone fails it: the fast path decides deferrals and fetches for
announcements that reach its common case, so a check it drops, adds or moves shows up as a
decision or a state that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import simulator.fastpath.heard_run as fast
from protocol.admission import AdmissionRules, Decision, Defer, Fetch, Inbox
from protocol.envelope import seal
from protocol.fetch_draw import FetchDraw, fetch_priority
from protocol.messages import RolloutAnnouncement
from protocol.rounds import COLLECTING_PHASES, Phase
from protocol.scoring import PeerScores
from protocol.seeds import unit_interval
from protocol.sender_map import PeerNumbers
from simulator.fastpath.peer_sets import PeersExcept
from simulator.fastpath.shared_open import SharedOpen
from swarmp2p.peer_cache import VerifyCache
from tests.helpers.budget import examples
from tests.helpers.inbox import key, pid

SWARM = "rules"
SEED = 23
ROUND = 7
MAX_BATCH = 5000
KEYS = [key(f"fast-rules-{i}") for i in range(5)]
PEERS = [pid(k) for k in KEYS]
OUTSIDER = pid(key("fast-rules-outsider"))  # never signs: only ever a transport sender
DEFERRED = "deferred (nothing yielded)"


@attrs.define
class Position:
    """The round machine as admission reads it: the current (round, stage) and the phase."""

    round: int
    stage: int
    phase: Phase

    def current_position(self) -> tuple[int, int]:
        return (self.round, self.stage)

    def collecting(self, round_number: int, stage: int = 0) -> bool:
        return (round_number, stage) == (self.round, self.stage) and self.phase in COLLECTING_PHASES


@attrs.frozen
class Stages:
    """A game as `heard` and `consider` read it: how many stages a round has."""

    stage_count: int


SIZES = [100, MAX_BATCH - 1, MAX_BATCH, MAX_BATCH + 1]  # around the batch bound


@cache
def _sealed(signer: int, swarm: str, round_number: int, stage: int, variant: int, size: int) -> bytes:
    digest = hashlib.sha256(bytes([variant])).digest()  # two per round: an equivocation
    announcement = RolloutAnnouncement(swarm, round_number, stage, PEERS[signer], digest, 2, size)
    return seal(announcement, KEYS[signer])  # signing is the slow part: once per announcement


KINDS = ["signed"] * 20 + ["relayed", "outsider", "bad_signature", "garbage", "padded"]


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, bytes]:
    """(transport sender, data): an announcement, mostly well formed, or one of the ways not."""
    signer = draw(st.integers(0, len(KEYS) - 1))
    data = _sealed(
        signer,
        draw(st.sampled_from([SWARM] * 8 + ["other-swarm"])),
        ROUND + draw(st.sampled_from([0] * 10 + [-1, 1, 2])),
        draw(st.sampled_from([0] * 6 + [1, 2])),
        draw(st.sampled_from([0] * 5 + [1])),
        draw(st.sampled_from(SIZES)),
    )
    sender = PEERS[signer]
    kind = draw(st.sampled_from(KINDS))
    if kind == "relayed":
        sender = PEERS[(signer + 1) % len(PEERS)]
    elif kind == "outsider":
        sender = OUTSIDER
    elif kind == "bad_signature":
        data = data[:-1] + bytes([data[-1] ^ 1])
    elif kind == "garbage":
        data = b"\x93not an envelope"
    elif kind == "padded":
        data = data + b"\x00" * 400  # over a small announcement bound, else trailing bytes
    return sender, data


first_announcements = st.lists(st.sampled_from(SIZES), min_size=len(PEERS), max_size=len(PEERS)).map(
    lambda sizes: [(PEERS[i], _sealed(i, SWARM, ROUND, 0, 0, size)) for i, size in enumerate(sizes)]
)
"""Each peer's announcement of the round: most deliveries in a simulated round (the fast path's
common case, unless the receiver has heard it already or is not collecting)."""

receivers = st.fixed_dictionaries(
    {
        "me": st.sampled_from([PEERS[0]] + ["someone-else"] * 3),
        "stage_count": st.sampled_from([1, 1, 3]),
        "state_stage": st.sampled_from([0] * 5 + [1]),
        "position": st.sampled_from([(0, 0)] * 6 + [(1, 0), (0, 1)]),  # from ROUND, state_stage
        "phase": st.sampled_from([Phase.COLLECTING] * 6 + [Phase.GENERATING, Phase.TRAINING]),
        "fetch_sample": st.sampled_from([0, 1, 1, 2]),
        "connected_count": st.integers(1, 12),  # with fetch_sample: the round's fetch probability
        "ban_threshold": st.sampled_from([2, 5]),  # strikes: relayed, malformed, flooding senders
        "max_announce_bytes": st.sampled_from([1280, 1280, 400]),
        "max_fetch_per_round": st.integers(1, 8),
        "unknown_fetch_share": st.sampled_from([0.1, 0.5, 1.0]),
        "max_early_unknown": st.integers(0, 2),
        "max_duplicates_per_round": st.integers(0, 2),
        "max_top_ups_per_round": st.integers(0, 3),
        "banned": st.sampled_from([set(), set(), set(), {PEERS[1]}, {PEERS[2], PEERS[3]}]),
        "valid": st.sets(st.sampled_from(PEERS), max_size=2),  # batches of theirs verified before
        # numbered before the stream (the simulator numbers every peer at its start)
        "numbered": st.one_of(st.just(PEERS), st.lists(st.sampled_from(PEERS), unique=True)),
    }
)

peer_views = st.fixed_dictionaries(
    {
        "base": st.frozensets(st.sampled_from(PEERS)),
        "joined": st.lists(st.sampled_from(PEERS), unique=True),
        "count": st.integers(0, len(PEERS)),
    }
)

# Between instants: a ban (as a strike past the threshold would), or new connected peers.
changes = st.sampled_from(["connect"] * 4 + ["ban"]).flatmap(
    lambda kind: st.tuples(st.just(kind), peer_views if kind == "connect" else st.sampled_from(PEERS))
)

instants = st.lists(
    st.tuples(
        # (message of the pool, opened already at this instant by another receiver sharing the cache)
        st.lists(st.tuples(st.integers(0, 11), st.sampled_from([True, True, False])), min_size=1, max_size=6),
        st.lists(changes, max_size=1),
    ),
    min_size=1,
    max_size=5,
)


def _inbox(plan: dict[str, Any], numbers: PeerNumbers | None) -> tuple[Inbox, VerifyCache]:
    rules = AdmissionRules(
        swarm_id=SWARM,
        me=plan["me"],
        seed=SEED,
        max_batch_bytes=MAX_BATCH,
        **{name: plan[name] for name in _RULE_KNOBS},
    )
    round_ahead, stage_ahead = plan["position"]
    machine = Position(ROUND + round_ahead, plan["state_stage"] + stage_ahead, plan["phase"])
    scores = PeerScores(ban_threshold=plan["ban_threshold"])
    scores.banned.update(plan["banned"])
    for peer in plan["valid"]:
        scores.record_valid(peer)
    cache = VerifyCache(max_entries=64, identity_entries=16)
    game = Stages(plan["stage_count"])
    inbox = Inbox(rules, machine, game, opener=cache, scores=scores, peer_numbers=numbers)  # type: ignore[arg-type]
    inbox.open_round(ROUND, plan["state_stage"], connected=plan["connected_count"])
    return inbox, cache


_RULE_KNOBS = (
    "fetch_sample",
    "max_announce_bytes",
    "max_fetch_per_round",
    "unknown_fetch_share",
    "max_early_unknown",
    "max_duplicates_per_round",
    "max_top_ups_per_round",
)


def _connect(reference: Inbox, fast_inbox: Inbox, view: dict[str, Any]) -> None:
    """The same connected peers: a node's frozenset, and the simulator's shared view of them."""
    base: frozenset[str] = view["base"]
    joined = [peer for peer in view["joined"] if peer not in base]
    count = min(view["count"], len(joined))
    me = reference.rules.me
    reference.peers_connected(frozenset(base | set(joined[:count])) - {me})
    fast_inbox.peers_connected(PeersExcept(base, me, joined, {p: i for i, p in enumerate(joined)}, count))


def _state(inbox: Inbox, cache: VerifyCache) -> tuple[object, ...]:
    current = inbox.current
    assert current is not None
    return (
        dict(inbox.rejections),
        dict(inbox.counters),
        sorted(inbox.scores.banned),
        dict(inbox.scores.invalid),
        dict(inbox.known),
        {r: dict(e) for r, e in inbox.early.items()},
        dict(inbox.early_unknown),
        sorted(inbox.connected),
        dict(current.announced),
        dict(current.deferred.items()),
        dict(current.duplicates),
        dict(current.rejected),
        current.fetches,
        current.unknown_fetches,
        (cache.hits, cache.misses),
    )


def _reference_decisions(inbox: Inbox, run: list[tuple[str, bytes]]) -> list[Decision]:
    """`Inbox.heard` (and through it `consider`) for each message, a Fetch queued at once."""
    decided = []
    for sender, data in run:
        decision = inbox.heard(sender, data)
        if type(decision) is Fetch:
            inbox.queued(decision.job)
        decided.append(decision)
    return decided


def _fast_decisions(inbox: Inbox, items: list[fast.Item]) -> list[object]:
    """`heard_run` over the instant's run, as the simulator's delivery takes it: SLOW items on
    the usual path (`Inbox.heard`) before the run goes on, a Fetch queued at once."""
    decided: list[object] = []
    for index, outcome in fast.heard_run(inbox, items):
        _passed_over(decided, index)
        sender, data, shared = items[index]
        if outcome is fast.SLOW:
            event("an item on the usual path")
            decision = inbox.heard(sender, data, shared)
        elif type(outcome) is Fetch:
            event("a fetch decided by the fast path")
            decision = outcome
        else:
            raise AssertionError(f"deciding item {index} raised") from outcome  # type: ignore[misc]
        if type(decision) is Fetch:
            inbox.queued(decision.job)
        decided.append(decision)
    _passed_over(decided, len(items))
    return decided


def _passed_over(decided: list[object], index: int) -> None:
    """The items before `index` that `heard_run` yielded nothing for: deferrals."""
    if index > len(decided):
        event("a deferral decided by the fast path")
        decided += [DEFERRED] * (index - len(decided))


@contextmanager
def _loop(compiled: bool) -> Iterator[None]:
    """The C loop, or the Python fallback (as where no compiler was found)."""
    saved = fast._compiled_heard_run
    if compiled:
        assert saved is not None, "simulator.fastpath._hot_loops is not built (pip install -e .)"
    else:
        fast._compiled_heard_run = None
    try:
        yield
    finally:
        fast._compiled_heard_run = saved


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "python"])
@settings(max_examples=examples(0.5))  # each loop: the two together are one property's budget
@given(
    plan=receivers,
    first=first_announcements,
    extras=st.lists(messages(), max_size=8),
    view=peer_views,
    stream=instants,
)
def test_the_fast_path_decides_every_message_as_the_admission_rules_do(
    compiled: bool,
    plan: dict[str, Any],
    first: list[tuple[str, bytes]],
    extras: list[tuple[str, bytes]],
    view: dict[str, Any],
    stream: list[tuple[list[tuple[int, bool]], list[tuple[str, Any]]]],
) -> None:
    pool = [*first, *extras]
    reference, reference_cache = _inbox(plan, None)  # a node's dicts: heard, then consider
    fast_inbox, fast_cache = _inbox(plan, PeerNumbers(plan["numbered"]))
    _connect(reference, fast_inbox, view)
    with _loop(compiled):
        for deliveries, between in stream:
            shared_of: dict[int, SharedOpen] = {}  # one per message and instant, as the world's
            run, items = [], []
            for number, opened_before in deliveries:
                sender, data = pool[number % len(pool)]
                shared = shared_of.get(id(data))
                if shared is None:
                    shared = shared_of[id(data)] = SharedOpen(data)
                    if opened_before and len(data) <= plan["max_announce_bytes"]:
                        # Another receiver with the same cache took it first at this instant.
                        bound = plan["max_announce_bytes"]
                        _open_quietly(lambda shared=shared, bound=bound: shared.open(fast_cache, bound))
                        _open_quietly(
                            lambda data=data, bound=bound: reference_cache.open(data, max_size=bound)
                        )
                run.append((sender, data))
                items.append((sender, data, shared))
            expected = _reference_decisions(reference, run)
            decided = _fast_decisions(fast_inbox, items)
            for message, want, got in zip(run, expected, decided, strict=True):
                if got == DEFERRED:
                    assert type(want) is Defer, (message, want)
                else:
                    assert got == want, (message, want, got)
            for shared in shared_of.values():
                shared.settle()
            assert _state(fast_inbox, fast_cache) == _state(reference, reference_cache)
            for change, value in between:
                if change == "ban":
                    reference.scores.ban(value, "test")
                    fast_inbox.scores.ban(value, "test")
                else:
                    _connect(reference, fast_inbox, value)


def _open_quietly(open_it: Any) -> None:
    try:
        open_it()
    except Exception as error:  # a bad envelope: the outcome is remembered either way
        assert type(error).__name__ == "ProtocolError"


def test_the_fast_path_decides_the_common_case_itself() -> None:
    """The property above would hold if `heard_run` sent everything down the usual path: here a
    round's first announcements, opened already by another receiver, are decided in the run
    (sampled at 1 of 5: deferrals yield nothing, the rest are fetches), by both loops."""
    plan = {
        "me": "someone-else",
        "stage_count": 1,
        "state_stage": 0,
        "position": (0, 0),
        "phase": Phase.COLLECTING,
        "fetch_sample": 1,
        "connected_count": 5,
        "max_announce_bytes": 1280,
        "max_fetch_per_round": 64,
        "unknown_fetch_share": 1.0,
        "max_early_unknown": 1,
        "ban_threshold": 2,
        "max_duplicates_per_round": 1,
        "max_top_ups_per_round": 1,
        "banned": set(),
        "valid": set(),
        "numbered": PEERS,
    }
    announcements = [
        seal(RolloutAnnouncement(SWARM, ROUND, 0, peer, b"d" * 32, 2, 100), signer)
        for signer, peer in zip(KEYS, PEERS, strict=True)
    ]
    for compiled in (True, False):
        inbox, cache = _inbox(plan, PeerNumbers(PEERS))
        items = []
        for peer, data in zip(PEERS, announcements, strict=True):
            shared = SharedOpen(data)
            shared.open(cache, 1280)
            items.append((peer, data, shared))
        with _loop(compiled):
            outcomes = [outcome for _, outcome in fast.heard_run(inbox, items)]
        assert outcomes and all(type(outcome) is Fetch for outcome in outcomes)
        assert inbox.counters["fetch_deferred"] == len(PEERS) - len(outcomes) > 0


def test_one_fetch_draw_is_the_protocol_seed_draw() -> None:
    """The fetch draw is `unit_interval(seed, round, me, sender, "fetch")`, with the round's
    prefix hashed once; the C loop's copy is held to it by the property above."""
    draw = FetchDraw(SEED, ROUND, PEERS[0])
    for sender in PEERS:
        expected = unit_interval(SEED, ROUND, PEERS[0], sender, "fetch")
        assert draw(sender) == fetch_priority(SEED, ROUND, PEERS[0], sender) == expected
