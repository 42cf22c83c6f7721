"""The simulator's fast delivery path decides exactly what the per-delivery path does.

`simulator.fastpath.delivery.handle_announcement_many([(fetcher, messages), ...])` (one call per
instant of the simulated world, each receiver with the messages that reach it then, each
envelope opened once: simulator/fastpath/shared_open.py) against
`handle_announcement(message)` once per receiver and message: on random receivers (rounds,
phases, bans, sampling, connected peers, what they heard before) and random messages (valid,
duplicate, equivocating, next round, stale, wrong swarm, relayed, garbage, oversized), the
decisions, every inbox's state and the shared VerifyCache's counters must be identical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import AdmissionRules, Inbox
from protocol.envelope import seal
from protocol.messages import RolloutAnnouncement
from protocol.rounds import Phase, RolloutsReady, RoundMachine, RoundOpened, Tick
from protocol.scoring import PeerScores
from protocol.sender_map import PeerNumbers
from simulator.fastpath.delivery import fast_handler, handle_announcement_many
from simulator.fastpath.heard_run import SLOW, heard_run
from simulator.fastpath.shared_open import SharedOpen
from swarmp2p.fetcher import Fetcher
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.ports import InboundMessage, InlineHandler
from tests.helpers.inbox import GAME, ROUND, SEED, SWARM, key, pid

SIGNERS = [key(f"signer{i}") for i in range(12)]
SENDERS = [pid(k) for k in SIGNERS]


def _announcement(
    signer: bytes, *, round_number: int = ROUND, variant: int = 0, swarm: str = SWARM, stage: int = 0
) -> bytes:
    digest = hashlib.sha256(f"{variant}".encode()).digest()
    return seal(RolloutAnnouncement(swarm, round_number, stage, pid(signer), digest, 2, 1000), signer)


def _messages() -> list[InboundMessage]:
    """A fixed pool (signing is the slow part), drawn from by the tests."""
    pool = []
    for i, signer in enumerate(SIGNERS):
        sender = SENDERS[i]
        pool += [
            InboundMessage("t", sender, _announcement(signer)),
            InboundMessage("t", sender, _announcement(signer, variant=1)),  # equivocation
            InboundMessage("t", sender, _announcement(signer, round_number=ROUND + 1)),  # held
            InboundMessage("t", sender, _announcement(signer, round_number=ROUND - 1)),  # stale
            InboundMessage("t", sender, _announcement(signer, swarm="other")),
            InboundMessage("t", SENDERS[(i + 1) % len(SENDERS)], _announcement(signer)),  # relayed
            InboundMessage("t", sender, _announcement(signer, stage=1)),  # a stage the game lacks
        ]
    pool += [
        InboundMessage("t", SENDERS[0], b"\x93garbage"),
        InboundMessage("t", SENDERS[1], b"x" * 2000),  # oversized
    ]
    return pool


MESSAGES = _messages()
COMMON = [7 * i for i in range(len(SIGNERS))]  # each signer's valid one: the fast path's case


class _Network:
    def __init__(self, connected: Sequence[str]) -> None:
        self.connected = list(connected)
        self.bounds_waits = True

    def connected_peers(self) -> list[str]:
        return self.connected


receiver_plans = st.fixed_dictionaries(
    {
        "round": st.sampled_from([ROUND, ROUND, ROUND, ROUND - 1, ROUND + 1]),
        "fetch_sample": st.sampled_from([0, 1, 3]),
        "connected_count": st.integers(0, 6),
        "connected": st.one_of(st.just(set(SENDERS)), st.sets(st.sampled_from(SENDERS))),
        "network": st.sets(st.sampled_from(SENDERS)),  # who the network says is connected later
        "banned": st.sets(st.sampled_from(SENDERS), max_size=2),
        "max_fetch_per_round": st.integers(1, 6),
        "max_top_ups_per_round": st.integers(0, 3),
        "max_early_unknown": st.integers(0, 2),
        "max_duplicates_per_round": st.integers(0, 2),
        "me": st.sampled_from([*SENDERS[:1], "someone-else"]),
        "training": st.sampled_from([False, False, False, True]),  # past the collect deadline
    }
)


def _build(
    plans: list[dict[str, Any]], numbered: Sequence[str] | None = None
) -> tuple[list[Fetcher], list[list[object]], VerifyCache]:
    """`numbered`: the receivers share a PeerNumbers that starts with these peers (the
    simulator's list-backed maps); None: each inbox keeps dicts (a node's)."""
    cache = VerifyCache(max_entries=64, identity_entries=16)
    numbers = None if numbered is None else PeerNumbers(numbered)
    fetchers, taken = [], []
    for plan in plans:
        machine = RoundMachine()
        machine.handle(0, RoundOpened(plan["round"], collect_until_ms=1000, round_ends_ms=2000))
        if plan.get("training"):
            machine.handle(0, RolloutsReady(plan["round"]))
            machine.handle(1500, Tick())
            assert machine.phase is Phase.TRAINING
        rules = AdmissionRules(
            swarm_id=SWARM,
            me=plan["me"],
            seed=SEED,
            fetch_sample=plan["fetch_sample"],
            max_fetch_per_round=plan["max_fetch_per_round"],
            max_top_ups_per_round=plan["max_top_ups_per_round"],
            max_early_unknown=plan["max_early_unknown"],
            max_duplicates_per_round=plan["max_duplicates_per_round"],
            unknown_fetch_share=0.5,
        )
        scores = PeerScores(ban_threshold=2)
        scores.banned.update(plan["banned"])
        inbox = Inbox(rules, machine, GAME, opener=cache, scores=scores, peer_numbers=numbers)
        inbox.open_round(plan["round"], 0, connected=plan["connected_count"])
        inbox.peers_connected(sorted(plan["connected"]))  # as the Peer does at round open
        fetcher = Fetcher.__new__(Fetcher)  # no settings or queue: what it queues is recorded
        fetcher.peer_id = plan["me"]
        fetcher.network = _Network(sorted(plan["network"]))  # type: ignore[assignment]
        fetcher.inbox = inbox
        fetcher.cache = cache
        fetcher.counters = inbox.counters
        decisions: list[object] = []  # what the fetcher carries out: fetches queued, holds

        def enqueue(job: Any, done: list[object] = decisions, inbox: Inbox = inbox) -> None:
            done.append(job)
            inbox.queued(job)  # as Fetcher.enqueue does when the queue has room

        fetcher.enqueue = enqueue  # type: ignore[method-assign]
        fetcher._on_hold = lambda done=decisions: done.append("hold")
        fetchers.append(fetcher)
        taken.append(decisions)
    return fetchers, taken, cache


def _state(fetcher: Fetcher) -> tuple[object, ...]:
    inbox = fetcher.inbox
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
    )


MESSAGE_INDEX = st.one_of(st.sampled_from(COMMON), st.sampled_from(range(len(MESSAGES))))


@given(
    plans=st.lists(receiver_plans, min_size=1, max_size=6),
    instants=st.lists(st.lists(MESSAGE_INDEX, min_size=1, max_size=12), min_size=1, max_size=4),
    data=st.data(),
)
def test_the_many_path_decides_what_the_per_delivery_path_does(
    plans: list[dict[str, Any]], instants: list[list[int]], data: st.DataObject
) -> None:
    # The per-delivery path on a node's dicts, the many path on the simulator's numbered lists,
    # some senders numbered before (their slots are there), the others numbered as they come.
    numbered = data.draw(st.lists(st.sampled_from(SENDERS), unique=True))
    one, one_taken, one_cache = _build(plans)
    many, many_taken, many_cache = _build(plans, numbered)
    for instant in instants:
        # Each receiver gets some of the instant's messages (loss, latency), in their order.
        masks = [
            data.draw(st.lists(st.booleans(), min_size=len(instant), max_size=len(instant))) for _ in plans
        ]
        runs = [[MESSAGES[i] for i, kept in zip(instant, mask, strict=True) if kept] for mask in masks]
        for fetcher, messages in zip(one, runs, strict=True):
            for message in messages:
                fetcher.handle_announcement(message)
        handle_announcement_many([(f, m) for f, m in zip(many, runs, strict=True) if m])
    assert one_taken == many_taken
    assert [_state(f) for f in one] == [_state(f) for f in many]
    assert (one_cache.hits, one_cache.misses) == (many_cache.hits, many_cache.misses)


def test_the_inline_handler_is_the_fetchers_per_message_handler_too() -> None:
    (fetcher,), (taken,), _ = _build([{**_PLAN}])
    handler = fetcher.inline_handler()
    assert isinstance(handler, InlineHandler) and handler.receiver is fetcher
    handler(MESSAGES[0])
    assert len(taken) == 1 and taken[0].sender == SENDERS[0]  # type: ignore[attr-defined]


def test_the_simulated_network_puts_the_fast_path_in_a_fetchers_handler() -> None:
    (fetcher,), _, _ = _build([{**_PLAN}])
    plain = fetcher.inline_handler()
    fast = fast_handler(plain)
    assert fast.many is handle_announcement_many and fast.many is not plain.many
    assert (fast.one, fast.receiver) == (plain.one, plain.receiver)
    other = InlineHandler(print, print, None)
    assert fast_handler(other) is other  # not a fetcher's: left as it is


_PLAN: dict[str, Any] = {
    "round": ROUND,
    "fetch_sample": 0,
    "connected_count": 1,
    "connected": set(),
    "network": set(),
    "banned": set(),
    "max_fetch_per_round": 4,
    "max_top_ups_per_round": 1,
    "max_early_unknown": 1,
    "max_duplicates_per_round": 1,
    "me": "someone-else",
}


def _fast_path_outcomes(
    numbered: Sequence[str] | None, connected: Sequence[str] = SENDERS, fetch_sample: int = 0
) -> list[object]:
    """What `heard_run` yields for six senders' first announcements, each envelope already
    opened (as the first of many receivers does)."""
    plan = {**_PLAN, "connected": set(connected), "max_fetch_per_round": 64, "fetch_sample": fetch_sample}
    plan["connected_count"] = 6  # the sampling probability: fetch_sample / 6
    (fetcher,), _, _ = _build([plan], numbered)
    inbox = fetcher.inbox
    run = []
    for message in [MESSAGES[i] for i in COMMON[:6]]:
        shared = SharedOpen(message.data)
        shared.open(inbox.opener, inbox.rules.max_announce_bytes)
        run.append((message.transport_sender, message.data, shared))
    return [outcome for _, outcome in heard_run(inbox, run)]


def test_numbered_inboxes_take_the_fast_path_and_dicts_do_not() -> None:
    """The equivalence above would also hold if the fast path never ran: here it must decide
    established senders' first announcements itself, for the simulator's numbered maps."""
    fast = _fast_path_outcomes(SENDERS)
    assert len(fast) == 6 and SLOW not in fast
    assert _fast_path_outcomes(None) == [SLOW] * 6  # a node's dicts: the usual path


def test_unknown_senders_take_the_fast_path_while_their_budget_has_room() -> None:
    # Round 0 of a simulated swarm: each peer's connected set is the peers online before it.
    # With every announcement fetched (no sampling), the unknown budget (64 x 0.5 = 32) has
    # room for all six; the equivalence test above covers a full one.
    fast = _fast_path_outcomes(SENDERS, connected=())
    assert len(fast) == 6 and SLOW not in fast
    # Sampled (fetch_sample 1 of 6): a deferral spends no budget and yields nothing (this seed's
    # draws sample out at least one of the six).
    sampled = _fast_path_outcomes(SENDERS, connected=(), fetch_sample=1)
    assert SLOW not in sampled and len(sampled) < 6
