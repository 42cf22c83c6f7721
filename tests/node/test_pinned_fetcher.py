"""The fetcher's duties a plausible bug would drop without any other test noticing: the unknown
senders' lane keeps its worker limit, connected peers are refreshed before an unknown sender is
refused, a failed DHT sweep lookup takes no top-up, a malformed pushed wrapper is blamed on its
sender, and a round's opening tells the inbox who is connected. Each test fails on the bug named
in its docstring.

A Fetcher over the real admission Inbox and a scripted network port on trio's virtual clock."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from protocol.admission import Defer, Fetch, Inbox
from swarmp2p.fetcher import Fetcher
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import PeerSettings
from swarmp2p.ports import InboundMessage, NetworkError
from swarmp2p.pushed import PUSHED_PREFIX
from tests.helpers.inbox import ALICE, ROUND, SEED, SWARM, announce, batch_envelope, make_inbox, pid
from tests.helpers.peer_harness import Harness

TIMEOUT_S = 1.0


class ScriptedNetwork:
    """Connected peers as set by the test; every fetch request waits out its timeout (the
    announcer never answers) and every DHT lookup finds nothing. Records who was asked, when."""

    bounds_waits = True

    def __init__(self) -> None:
        self.connected: set[str] = set()
        self.asked: list[tuple[float, str]] = []
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self.dht_lookups = 0

    def connected_peers(self) -> Sequence[str]:
        return sorted(self.connected)

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        self.asked.append((trio.current_time(), peer_id))
        kind = "established" if peer_id in self.connected else "unknown"
        self.in_flight[kind] = self.in_flight.get(kind, 0) + 1
        self.most_in_flight[kind] = max(self.most_in_flight.get(kind, 0), self.in_flight[kind])
        try:
            await trio.sleep(timeout_s)
        finally:
            self.in_flight[kind] -= 1
        raise NetworkError("no answer")

    async def dht_get(self, key: str) -> bytes | None:
        self.dht_lookups += 1
        return None


def fetcher_for(inbox: Inbox, network: ScriptedNetwork, **settings: object) -> Fetcher:
    peer_settings = PeerSettings(
        swarm_id=SWARM, seed=SEED, tasks=("echo",), fetch_timeout_s=TIMEOUT_S, **settings
    )  # type: ignore[arg-type]
    return Fetcher(peer_settings, inbox.rules.me, network, inbox, VerifyCache(), on_hold=lambda: None)  # type: ignore[arg-type]


def key(i: int) -> bytes:
    return bytes([i + 1]) * 32


def announcement_from(i: int) -> InboundMessage:
    signer = key(i)
    return InboundMessage("announce", pid(signer), announce(signer, batch_envelope(signer)))


def run(test: object) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


def test_unknown_senders_fetches_take_at_most_their_workers_and_leave_the_rest_free() -> None:
    """Bug: the unknown lane's worker limit dropped, so throwaway keys' fetches (each waiting out
    its timeout) take every worker and an established peer's fetch waits behind them."""
    network = ScriptedNetwork()
    inbox = make_inbox(unknown_fetch_share=1.0)
    established = 99
    network.connected.add(pid(key(established)))
    inbox.peers_connected(network.connected_peers())

    async def main() -> None:
        fetcher = fetcher_for(inbox, network, fetch_concurrency=4, unknown_fetch_concurrency=2)
        async with trio.open_nursery() as nursery:
            fetcher.start(nursery)
            for i in range(8):  # unknown keys first, all at once
                fetcher.handle_announcement(announcement_from(i))
            await trio.sleep(0.1)
            fetcher.handle_announcement(announcement_from(established))
            await trio.sleep(10 * TIMEOUT_S)
            nursery.cancel_scope.cancel()

    run(main)
    assert network.most_in_flight["unknown"] == 2
    asked_at = dict((peer, at) for at, peer in network.asked)
    assert asked_at[pid(key(established))] < TIMEOUT_S  # at once, not after the unknown ones
    assert len({peer for _, peer in network.asked}) == 9  # every unknown key still fetched in turn


def test_connected_peers_are_refreshed_before_an_unknown_sender_is_refused() -> None:
    """Bug: the inbox refuses a sender as an unknown key (its unknown budget spent) although the
    sender connected since the round opened."""
    network = ScriptedNetwork()
    inbox = make_inbox(max_fetch_per_round=4, unknown_fetch_share=0.25)  # one unknown fetch a round
    fetcher = fetcher_for(inbox, network)
    queued: list[object] = []
    fetcher.enqueue = lambda job: queued.append(job) or True  # type: ignore[method-assign]
    fetcher.handle_announcement(announcement_from(0))  # the round's one unknown fetch
    assert inbox.unknown_budget_full()
    network.connected.add(pid(key(1)))  # connects after the round opened
    fetcher.handle_announcement(announcement_from(1))
    assert [job.sender for job in queued] == [pid(key(0)), pid(key(1))]  # type: ignore[attr-defined]
    assert inbox.rejections["fetch_unknown_limit"] == 0
    fetcher.handle_announcement(announcement_from(2))  # still unknown: refused
    assert inbox.rejections["fetch_unknown_limit"] == 1 and len(queued) == 2


def test_a_failed_sweep_lookup_takes_no_top_up() -> None:
    """Bug: a DHT sweep lookup that finds nothing takes a deferred announcement's top-up, as a
    failed sampled fetch does: the sweep then spends the round's top-ups on peers it sampled out."""
    network = ScriptedNetwork()
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(ROUND, 0, connected=3)  # fetch about one announcement in three
    deferred = [
        i for i in range(12) if isinstance(inbox.heard(*_heard_args(i)), Defer)
    ]  # heard, never fetched: only the sweep's jobs run below
    assert len(deferred) >= 4
    silent = _sweepable_peer(inbox)  # connected, announced nothing, not sampled out
    network.connected.add(silent)
    deferred_before = len(inbox.current.deferred)  # type: ignore[union-attr]

    async def main() -> None:
        fetcher = fetcher_for(inbox, network)
        async with trio.open_nursery() as nursery:
            fetcher.start(nursery)
            fetcher.sweep()
            await trio.sleep(10 * TIMEOUT_S)
            nursery.cancel_scope.cancel()

    run(main)
    assert {peer for _, peer in network.asked} == {silent}
    assert network.dht_lookups == 1 and inbox.counters["sweep_missing"] == 1
    assert len(inbox.current.deferred) == deferred_before  # type: ignore[union-attr]
    # A failed announced fetch does take one (the rule the sweep must not share).
    assert isinstance(inbox.top_up(ROUND), Fetch)


def _heard_args(i: int) -> tuple[str, bytes]:
    signer = key(i)
    return pid(signer), announce(signer, batch_envelope(signer))


def _sweepable_peer(inbox: Inbox) -> str:
    """A peer id the round's fetch draw keeps (the sweep skips the sampled-out ones)."""
    for i in range(50, 250):
        probe = make_inbox(fetch_sample=1)
        probe.open_round(ROUND, 0, connected=3)
        peer = pid(key(i))
        if list(probe.sweep([peer])):
            return peer
    raise AssertionError("no peer id drawn in 200 tries")


def test_a_malformed_pushed_wrapper_is_blamed_on_its_sender() -> None:
    """Bug: a payload that claims to be a pushed batch and is not one is refused unblamed, so a
    peer can send garbage on the topic forever without a strike."""
    inbox = make_inbox()
    fetcher = fetcher_for(inbox, ScriptedNetwork())
    sender = pid(ALICE)
    fetcher.handle_announcement(InboundMessage("announce", sender, PUSHED_PREFIX + b"\xc1 not msgpack"))
    assert sum(inbox.rejections.values()) == 1
    assert inbox.scores.invalid[sender] == 1
    for _ in range(2):
        fetcher.handle_announcement(InboundMessage("announce", sender, PUSHED_PREFIX))
    assert inbox.scores.is_banned(sender)  # three strikes (make_inbox: ban_threshold 3)


def test_a_rounds_opening_tells_the_inbox_who_is_connected() -> None:
    """Bug: the round opens without reporting the connected peers to the inbox, so in a fresh
    swarm every honest peer is an unknown key (its fetches in the slow lane, under the unknown
    share) until a batch of its verifies."""
    seen: dict[str, object] = {}

    async def look(h: Harness) -> None:
        await trio.sleep(0.5)  # round 0 has opened; no batch has been fetched yet
        peer = h.peers[0]
        others = {p.peer_id for p in h.peers[1:]}
        seen["connected"] = set(peer.inbox.connected) & others
        seen["others"] = others
        seen["valid"] = dict(peer.inbox.scores.valid)

    Harness().run(1, look)
    assert seen["valid"] == {}
    assert seen["connected"] == seen["others"]
