"""Relays skip the peers that already hold the author's flood publish (swarmp2p/net/neighbours.py,
CountingGossipSub._skip_origin_neighbours), and still announce the message to them by IHAVE.

Before: each peer of a fully connected swarm received every message once from its author and
once more from every mesh peer that relayed it (~7 copies at 20 processes). Now a relay is sent
only to peers that have not told us, in peer exchange, that they are connected to the author."""

from __future__ import annotations

import math
from contextlib import AsyncExitStack
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from swarmp2p.net import PEERS_PROTOCOL, NetworkSettings, open_libp2p_network
from swarmp2p.net.neighbours import NeighbourMap, backup_relay
from swarmp2p.net.peer_exchange import PeerExchange

TOPIC = "swarmp2p/test/neighbours"
QUICK = NetworkSettings(heartbeat_s=0.2, upkeep_interval_s=0.2, handler_timeout_s=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


PEERS = [bytes([i]) for i in range(4)]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("learn"), st.sampled_from(PEERS), st.sets(st.sampled_from(PEERS))),
        st.tuples(st.just("forget"), st.sampled_from(PEERS), st.just(frozenset())),
        st.tuples(st.just("keep_only"), st.just(b""), st.sets(st.sampled_from(PEERS))),
        st.tuples(st.just("wait"), st.sampled_from([0.5, 4.0, 11.0]), st.just(frozenset())),
    ),
    max_size=30,
)


@given(ops)
def test_a_peer_counts_as_connected_only_to_what_it_said_last_and_recently(script: list[Any]) -> None:
    """Against a model: `connected(p, o)` holds iff p's last answer, not forgotten since and less
    than ttl old, listed o; the map never holds more than max_peers answers (oldest first out);
    `keep_only` forgets every peer outside the set it is given."""
    clock = Clock()
    neighbours = NeighbourMap(ttl_s=10.0, max_peers=3, clock=clock)
    model: dict[bytes, tuple[frozenset[bytes], float]] = {}
    for op, arg, listed in script:
        if op == "learn":
            neighbours.learn(arg, listed)
            model.pop(arg, None)
            model[arg] = (frozenset(listed), clock.now)
            while len(model) > 3:
                del model[next(iter(model))]
        elif op == "forget":
            neighbours.forget(arg)
            model.pop(arg, None)
        elif op == "keep_only":
            neighbours.keep_only(set(listed))
            model = {peer: said for peer, said in model.items() if peer in listed}
        else:
            clock.now += arg
        for peer in PEERS:
            for other in PEERS:
                said = model.get(peer)
                expected = said is not None and clock.now - said[1] < 10.0 and other in said[0]
                assert neighbours.connected(peer, other) == expected, (peer, other, model)
        for peer in PEERS:
            for other in PEERS:
                # Either end's answer (`linked`): symmetric, and the union of the two.
                assert neighbours.linked(peer, other) == neighbours.linked(other, peer)
                assert neighbours.linked(peer, other) == (
                    neighbours.connected(peer, other) or neighbours.connected(other, peer)
                )
            # The relay's bulk question: `linked` for each peer, in the peers' order.
            listed = [p for p in reversed(PEERS) if p != peer]
            assert neighbours.linked_to(peer, listed) == [p for p in listed if neighbours.linked(p, peer)]
        assert len(neighbours) <= 3


def test_answers_expire_and_are_forgotten() -> None:
    clock = Clock()
    neighbours = NeighbourMap(ttl_s=10.0, clock=clock)
    neighbours.learn(b"m", [b"author"])
    assert neighbours.connected(b"m", b"author") and neighbours.age(b"m") == 0.0
    assert not neighbours.connected(b"m", b"someone else")
    clock.now = 9.9
    assert neighbours.connected(b"m", b"author")
    clock.now = 10.0
    assert not neighbours.connected(b"m", b"author") and neighbours.age(b"m") is None
    neighbours.learn(b"m", [b"author"])
    neighbours.forget(b"m")
    assert not neighbours.connected(b"m", b"author")
    with pytest.raises(ValueError):
        NeighbourMap(ttl_s=0)


def test_changing_answers_are_asked_for_again_soon_settled_ones_at_half_the_ttl() -> None:
    """A joining peer's list grows: asked again after 5 s, then 10 s, 20 s while it changes; an
    answer that repeats the last one is renewed at ttl / 2 only (before it expires); a change
    after that starts the doubling again from there (capped at ttl / 2); forgetting starts over."""
    clock = Clock()
    neighbours = NeighbourMap(ttl_s=60.0, clock=clock, first_refresh_s=5.0)
    assert neighbours.due_in(b"m") == 0.0  # never told: ask now
    gaps = []
    for answer in ([b"a"], [b"a", b"b"], [b"a", b"b", b"c"], [b"a", b"b", b"c"], [b"a"], [b"a"]):
        neighbours.learn(b"m", answer)
        gaps.append(neighbours.due_in(b"m"))
        clock.now += gaps[-1]
        assert neighbours.due_in(b"m") <= 0.0
    assert gaps == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]
    neighbours.forget(b"m")
    assert neighbours.due_in(b"m") == 0.0
    neighbours.learn(b"m", [])
    assert neighbours.due_in(b"m") == 5.0


async def _open(stack: AsyncExitStack, settings: NetworkSettings, bootstrap: str | None = None) -> Any:
    if bootstrap:
        settings = attrs.evolve(settings, bootstrap=(bootstrap,))
    net = await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings))
    inbox = await net.subscribe(TOPIC)
    return net, inbox


async def _wait(predicate: Any, timeout_s: float = 15.0) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.05)


def _mesh(net: Any) -> set[str]:
    return {pid.to_base58() for pid in net.pubsub.router.mesh.get(TOPIC, ())}


async def _settled(*nets: Any) -> None:
    """Until every mesh peer of each net has answered it, no exchange with a mesh joiner is in
    flight and its own connections are told (`LibP2PNetwork.relays_settled`): a test that plants
    or forgets an answer must not race the one its mesh's forming asked for (`PeerExchange.on_mesh_join`)."""
    await _wait(lambda: all(net.relays_settled(1) for net in nets))


async def _four_settled(stack: AsyncExitStack, settings: NetworkSettings) -> list[tuple[Any, Any]]:
    """Four peers, all connected, each with the other three in its mesh and its relays settled
    (`LibP2PNetwork.relays_settled`): (network, inbox) each."""
    first, first_inbox = await _open(stack, settings)
    addr = first.listen_addrs()[0]
    opened = [(first, first_inbox)] + [await _open(stack, settings, addr) for _ in range(3)]
    # A mesh holds at most the other three: at least three is exactly three.
    await _wait(lambda: all(net.relays_settled(3) for net, _ in opened), timeout_s=20.0)
    return opened


def _exchanges_in_flight(monkeypatch: pytest.MonkeyPatch) -> list[tuple[PeerExchange, str]]:
    """Every peer exchange in flight from now on, as (asking host's exchange, asked peer): all
    asks go through `PeerExchange.exchange_peers` (the loop, the tells and the mesh-join asks)."""
    asking: list[tuple[PeerExchange, str]] = []
    exchange_peers = PeerExchange.exchange_peers

    async def counted(self: PeerExchange, peer_id: str) -> int:
        asking.append((self, peer_id))
        try:
            return await exchange_peers(self, peer_id)
        finally:
            asking.remove((self, peer_id))

    monkeypatch.setattr(PeerExchange, "exchange_peers", counted)
    return asking


def _count(net: Any, kind: str) -> int:
    return net.counters.snapshot()[kind]


@pytest.mark.parametrize("skip", [True, False])
def test_a_relay_skips_peers_connected_to_the_author(skip: bool) -> None:
    """Three peers, all connected, all in each other's mesh. The author's message reaches both
    others once from the author; with the skip neither relays it to the other (no duplicate,
    two relays skipped); without it (the check that this test can fail) both relay it and each
    receives a duplicate."""
    settings = attrs.evolve(QUICK, skip_relay_to_origin_neighbours=skip)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            author, _ = await _open(stack, settings)
            addr = author.listen_addrs()[0]
            b, b_inbox = await _open(stack, settings, addr)
            c, c_inbox = await _open(stack, settings, addr)
            nets = (author, b, c)
            await _wait(lambda: all(len(n.connected_peers()) == 2 for n in nets))
            await _wait(lambda: all(len(_mesh(n)) == 2 for n in nets))
            # What each relay knows of the other: asked now rather than waiting for the loop.
            assert (
                await b.exchange_peers(c.local_peer_id) >= 0 and await c.exchange_peers(b.local_peer_id) >= 0
            )
            await author.publish(TOPIC, b"round 1 announcement")
            for inbox in (b_inbox, c_inbox):
                with trio.fail_after(10):
                    got = await inbox.receive()
                assert got.data == b"round 1 announcement" and got.transport_sender == author.local_peer_id
            await trio.sleep(1.0)  # room for any relay to arrive
            duplicates = _count(b, "gossip_seen_duplicate") + _count(c, "gossip_seen_duplicate")
            skipped = _count(b, "gossip_relay_skipped_origin_neighbour") + _count(
                c, "gossip_relay_skipped_origin_neighbour"
            )
            if skip:
                assert (duplicates, skipped) == (0, 2)
            else:
                assert duplicates == 2 and skipped == 0

    trio.run(main)


def test_a_peer_told_wrongly_still_gets_the_message_by_ihave() -> None:
    """A line author - relay - far: `far` is not connected to the author, but the relay believes
    it is (a stale answer). The relay skips it and announces the message by IHAVE within three
    heartbeats; `far` asks for it (IWANT) and receives it. `far`'s only neighbour is the relay,
    a mesh peer, and py-libp2p's heartbeat gossip goes to peers outside the mesh only: without
    the IHAVE, `far` never receives it."""
    line = attrs.evolve(QUICK, target_peers=1)  # nobody dials past its one connection

    async def main() -> None:
        async with AsyncExitStack() as stack:
            relay, _ = await _open(stack, line)
            addr = relay.listen_addrs()[0]
            author, _ = await _open(stack, line, addr)
            far, far_inbox = await _open(stack, line, addr)
            await _wait(lambda: len(relay.connected_peers()) == 2 and len(_mesh(relay)) == 2)
            await _wait(
                lambda: _mesh(far) == {relay.local_peer_id} and _mesh(author) == {relay.local_peer_id}
            )
            await _settled(relay, author, far)
            author_id = ID.from_base58(author.local_peer_id).to_bytes()
            far_id = ID.from_base58(far.local_peer_id).to_bytes()
            relay.neighbours.learn(far_id, [author_id])  # wrong: far never connected to the author
            await author.publish(TOPIC, b"announcement")
            with trio.fail_after(10):
                got = await far_inbox.receive()
            assert got.data == b"announcement" and got.transport_sender == author.local_peer_id
            assert author.local_peer_id not in far.connected_peers()
            assert _count(relay, "gossip_relay_skipped_origin_neighbour") == 1

    trio.run(main)


def test_mesh_peers_are_asked_for_their_neighbours_and_forgotten_when_they_leave() -> None:
    """The peer-exchange loop asks every mesh peer for its connections (so relays can skip),
    and what a peer said is dropped once our connection to it closes."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            hub, _ = await _open(stack, QUICK)
            addr = hub.listen_addrs()[0]
            leaves_stack = AsyncExitStack()
            await leaves_stack.__aenter__()
            others = [await _open(stack, QUICK, addr) for _ in range(2)]
            leaver, _ = await _open(leaves_stack, QUICK, addr)
            peers = [net for net, _ in others] + [leaver]
            ids = {net.local_peer_id: ID.from_base58(net.local_peer_id).to_bytes() for net in peers}
            await _wait(lambda: _mesh(hub) == set(ids))
            await _wait(lambda: all(hub.neighbours.age(i) is not None for i in ids.values()))
            # Each answer lists the peer's connections: the hub at least.
            hub_id = ID.from_base58(hub.local_peer_id).to_bytes()
            assert all(hub.neighbours.connected(i, hub_id) for i in ids.values())
            await leaves_stack.aclose()
            # In one process py-libp2p can keep listing a stopped host's connections: close ours.
            await hub.host.disconnect(ID.from_base58(leaver.local_peer_id))
            await _wait(lambda: hub.neighbours.age(ids[leaver.local_peer_id]) is None)
            assert all(hub.neighbours.age(ids[net.local_peer_id]) is not None for net, _ in others)

    trio.run(main)


def test_an_exchange_tells_the_asked_peer_whom_the_asker_is_connected_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One peer exchange updates both sides: the asker learns the answer, and the asked peer
    learns the asker's connections from the request (`/swarmp2p/peers/1.1.0`). A peer that
    serves only the first version (empty request) is still asked, and learns nothing."""

    asking = _exchanges_in_flight(monkeypatch)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            hub, _ = await _open(stack, QUICK)
            addr = hub.listen_addrs()[0]
            asker, _ = await _open(stack, QUICK, addr)
            old, _ = await _open(stack, QUICK, addr)
            await _wait(lambda: all(len(n.connected_peers()) == 2 for n in (hub, asker, old)))
            await _wait(lambda: all(len(_mesh(n)) == 2 for n in (hub, asker, old)))
            await _settled(hub, asker, old)
            ids = {n: ID.from_base58(n.local_peer_id).to_bytes() for n in (hub, asker, old)}
            # Each asked peer learns the asker's list from its own asks too (its loop, tells,
            # mesh joins): it asks `asker` nothing more, and an ask in flight ends first.
            for asked in (hub, old):
                asked.exchange.quiet_until[asker.local_peer_id] = math.inf
            await _wait(lambda: all(exchange is asker.exchange for exchange, _ in asking))
            hub.neighbours.forget(ids[asker])
            assert await asker.exchange_peers(hub.local_peer_id) >= 0
            assert hub.neighbours.connected(ids[asker], ids[old])  # told by the request
            assert asker.neighbours.connected(ids[hub], ids[old])  # the answer
            old.host.remove_stream_handler(PEERS_PROTOCOL)  # as a node of the first version
            old.neighbours.forget(ids[asker])
            asker.neighbours.forget(ids[old])
            assert await asker.exchange_peers(old.local_peer_id) >= 0
            assert asker.neighbours.connected(ids[old], ids[hub])
            assert old.neighbours.age(ids[asker]) is None

    trio.run(main)


def test_a_node_tells_its_mesh_peers_of_a_new_connection_unasked() -> None:
    """`watcher` - `hub` - `joiner`, where `watcher` asks nobody again within the test (its
    peer exchange paced at 60 s). When `joiner` connects to `hub`, `hub` tells its mesh peers
    once its connections settle, so `watcher` (which relays to `hub`) learns that `hub` holds
    the joiner's messages from the joiner itself. Before, it learned it only from its own next
    ask, and a relay to `hub` in the meantime was a duplicate."""
    alone = attrs.evolve(QUICK, target_peers=1)  # no dials past the hub
    slow_asker = attrs.evolve(alone, peer_exchange_fast_s=60.0, peer_exchange_interval_s=60.0)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            hub, _ = await _open(stack, QUICK)
            addr = hub.listen_addrs()[0]
            watcher, _ = await _open(stack, slow_asker, addr)
            hub_id = ID.from_base58(hub.local_peer_id).to_bytes()
            await _wait(lambda: _mesh(watcher) == {hub.local_peer_id})
            await _wait(lambda: watcher.neighbours.age(hub_id) is not None)
            joiner, _ = await _open(stack, alone, addr)
            joiner_id = ID.from_base58(joiner.local_peer_id).to_bytes()
            await _wait(lambda: joiner.local_peer_id in hub.connected_peers())
            # The tell follows once the hub's connections hold still for a tick (0.2 s here) and
            # 2 s after its previous tell; the watcher's own next ask is 60 s away.
            await _wait(lambda: watcher.neighbours.connected(hub_id, joiner_id), timeout_s=10.0)
            assert joiner.local_peer_id not in watcher.connected_peers()

    trio.run(main)


def test_heartbeat_ihaves_leave_out_what_the_peer_got_from_the_author() -> None:
    """A heartbeat IHAVE to a peer outside the mesh lists only messages whose authors that peer
    has not told us it is connected to; one left empty is not sent at all."""
    from libp2p.pubsub.pb import rpc_pb2

    from swarmp2p.net.counters import DropCounters
    from swarmp2p.net.gossip import GOSSIP_PROTOCOLS
    from swarmp2p.net.gossip_router import CountingGossipSub

    def new_id() -> ID:
        return ID.from_pubkey(create_new_key_pair().public_key)

    author, other_author, told, untold = new_id(), new_id(), new_id(), new_id()
    router = CountingGossipSub(
        counters=DropCounters(), protocols=list(GOSSIP_PROTOCOLS), degree=6, degree_low=4, degree_high=12
    )
    router.origin_neighbours = NeighbourMap(ttl_s=60.0)
    router.origin_neighbours.learn(told.to_bytes(), [author.to_bytes()])
    mids = []
    for origin in (author, other_author):
        msg = rpc_pb2.Message(data=b"x", topicIDs=[TOPIC], from_id=origin.to_bytes(), seqno=b"\0" * 8)
        router.mcache.put(msg)
        mids.append(origin.to_bytes() + msg.seqno)
    gossip = {told: {TOPIC: list(mids)}, untold: {TOPIC: list(mids)}}
    router._drop_ids_their_authors_sent(gossip)
    assert gossip == {told: {TOPIC: [mids[1]]}, untold: {TOPIC: mids}}
    only_author = {told: {TOPIC: [mids[0]]}}
    router._drop_ids_their_authors_sent(only_author)
    assert only_author == {}


def test_a_relay_also_skips_the_peers_the_author_said_it_is_connected_to() -> None:
    """A connection has two ends: when only the author's answer lists the peer (the peer's own
    answer predates the connection, or we have none), the relay to that peer is skipped too;
    a peer neither end named still gets it."""
    from swarmp2p.net.counters import DropCounters
    from swarmp2p.net.gossip import GOSSIP_PROTOCOLS
    from swarmp2p.net.gossip_router import CountingGossipSub

    def new_id() -> ID:
        return ID.from_pubkey(create_new_key_pair().public_key)

    author, named_by_author, named_by_itself, unnamed = new_id(), new_id(), new_id(), new_id()
    counters = DropCounters()
    router = CountingGossipSub(
        counters=counters, protocols=list(GOSSIP_PROTOCOLS), degree=6, degree_low=4, degree_high=12
    )
    router.origin_neighbours = NeighbourMap(ttl_s=60.0)
    router.origin_neighbours.learn(author.to_bytes(), [named_by_author.to_bytes()])
    router.origin_neighbours.learn(named_by_itself.to_bytes(), [author.to_bytes()])
    router.origin_neighbours.learn(unnamed.to_bytes(), [])  # its answer predates any link to the author
    sent = router._skip_origin_neighbours(
        {named_by_author, named_by_itself, unnamed}, [TOPIC], author, author.to_bytes() + b"\0" * 8
    )
    assert sent == {unnamed}
    assert counters["gossip_relay_skipped_origin_neighbour"] == 2
    assert set(router._skipped_ihave) == {named_by_author, named_by_itself}  # still announced by IHAVE


def test_a_peer_joining_the_mesh_is_asked_whom_it_is_connected_to_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The router reports each peer that joins its mesh (grafted by us, or its GRAFT accepted),
    and the adapter asks that peer for its neighbours then, instead of when its paced peer
    exchange gets to it (60 s here): until it knows, each relay to the joiner may be a copy the
    joiner already has from the author. An answer younger than 2 s is not asked again."""
    slow_asker = attrs.evolve(QUICK, peer_exchange_fast_s=60.0, peer_exchange_interval_s=60.0)
    joined: list[tuple[str, str]] = []
    on_mesh_join = PeerExchange.on_mesh_join

    def recording(self: PeerExchange, pid: ID) -> None:
        joined.append((self._peers.local_peer_id, pid.to_base58()))
        on_mesh_join(self, pid)

    monkeypatch.setattr(PeerExchange, "on_mesh_join", recording)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            a, _ = await _open(stack, slow_asker)
            b, _ = await _open(stack, slow_asker, a.listen_addrs()[0])
            await _wait(lambda: _mesh(a) == {b.local_peer_id} and _mesh(b) == {a.local_peer_id})
            # Each end saw the other join: one grafted it, the other accepted its GRAFT.
            await _wait(lambda: len(set(joined)) == 2)
            assert set(joined) == {(a.local_peer_id, b.local_peer_id), (b.local_peer_id, a.local_peer_id)}
            # Forget what `a` knows of `b`; a join now asks at once (the loop is 60 s away).
            b_pid = ID.from_base58(b.local_peer_id)
            a.neighbours.forget(b_pid.to_bytes())
            a.exchange.on_mesh_join(b_pid)
            await _wait(lambda: a.neighbours.age(b_pid.to_bytes()) is not None, timeout_s=2.0)
            # A fresh answer is not asked for again.
            a.exchange.on_mesh_join(b_pid)
            assert not a.exchange.asking_joiners

    trio.run(main)


def test_relay_view_says_when_a_swarm_relays_without_duplicates() -> None:
    """`relay_view` (what bench_network.py waits for before its rounds, and what `status` shows):
    once every peer of a fully connected swarm of four has all its mesh peers' lists and has
    told them its own connections, each of the four publishes reaches every other peer once,
    with no duplicate. A list forgotten shows at once as one fewer known."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            opened = await _four_settled(stack, QUICK)
            nets = [net for net, _ in opened]
            first = nets[0]
            assert all(net.status()["relays"]["mesh_lists_known"] == 3 for net in nets)
            for author in nets:
                await author.publish(TOPIC, f"from {author.local_peer_id}".encode())
            for net, inbox in opened:
                got = set()
                with trio.fail_after(10):
                    while len(got) < 3:
                        got.add((await inbox.receive()).data)
                assert f"from {net.local_peer_id}".encode() not in got
            await trio.sleep(1.0)  # room for any relay to arrive
            assert [_count(net, "gossip_seen_duplicate") for net in nets] == [0, 0, 0, 0]
            assert sum(_count(net, "gossip_relay_skipped_origin_neighbour") for net in nets) > 0
            other = next(iter(first.pubsub.router.mesh[TOPIC]))
            first.neighbours.forget(other.to_bytes())
            assert first.relay_view()["mesh_lists_known"] == 2

    trio.run(main)


@given(
    st.binary(min_size=1, max_size=40),
    st.sets(st.binary(min_size=1, max_size=8), max_size=12),
    st.randoms(use_true_random=False),
)
def test_backup_relay_is_one_of_the_candidates_whatever_their_order(
    message_id: bytes, candidates: set[bytes], order: Any
) -> None:
    """Relays agree on one backup sender per (message, receiver) without talking: the pick is a
    candidate, none for no candidates, and the same in whatever order a relay lists them."""
    listed = sorted(candidates)
    picked = backup_relay(message_id, listed)
    order.shuffle(listed)
    assert backup_relay(message_id, listed) == picked
    assert (picked in candidates) if candidates else picked is None


def test_backup_relays_spread_over_messages() -> None:
    """A different message picks a different relay: over 600 messages, each of 6 candidates is
    picked for some, none for more than a third (the load spreads)."""
    candidates = [bytes([i]) * 8 for i in range(6)]
    picks = [backup_relay(f"message {i}".encode(), candidates) for i in range(600)]
    assert set(picks) == set(candidates)
    assert max(picks.count(c) for c in candidates) < 200


def test_with_backup_copies_each_peer_gets_exactly_one_second_copy() -> None:
    """`relay_backup_copy`: four peers, all connected, all in each other's mesh, each publishes
    once. Of the two other peers that relay a message to a receiver, exactly one sends it (the
    one `backup_relay` picks from the receiver's list): 12 backup copies and 12 skips, and every
    receiver holds exactly one duplicate per message it did not author."""
    settings = attrs.evolve(QUICK, relay_backup_copy=True)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            opened = await _four_settled(stack, settings)
            nets = [net for net, _ in opened]
            for author in nets:
                await author.publish(TOPIC, f"from {author.local_peer_id}".encode())
            for _, inbox in opened:
                with trio.fail_after(10):
                    for _ in range(3):
                        await inbox.receive()
            await trio.sleep(1.0)  # room for every relay to arrive
            assert sum(_count(net, "gossip_relay_backup_copy") for net in nets) == 12
            assert sum(_count(net, "gossip_relay_skipped_origin_neighbour") for net in nets) == 12
            assert [_count(net, "gossip_seen_duplicate") for net in nets] == [3, 3, 3, 3]

    trio.run(main)


def test_a_node_config_file_turns_the_backup_copy_on(tmp_path: Any) -> None:
    """`[node] relay_backup_copy = true` reaches the libp2p settings; off by default."""
    from swarmp2p.config import load_config
    from swarmp2p.node_config import NodeConfig
    from swarmp2p.node_setup import network_settings

    path = tmp_path / "swarm.toml"
    path.write_text("[node]\nrelay_backup_copy = true\n")
    on = load_config(NodeConfig, section="node", file=path, env={})
    assert network_settings(on).relay_backup_copy is True
    assert network_settings(NodeConfig()).relay_backup_copy is False
