"""Peer exchange: who is connected to whom, asked and told over direct streams.

- /swarmp2p/peers/1.1.0   msgpack list of the asker's connected peer ids -> msgpack list of
                          (peer id, listen addrs) this peer is connected to; so that nobody is
                          left in a star around the bootstrap peer, and so that each side learns
                          whom the other is connected to (net/neighbours.py).
- /swarmp2p/peers/1.0.0   the same with an empty request (the first version; still served, and
                          asked of a peer that refuses 1.1.0).

The exchanges run here: a paced loop that asks one peer at a time, tells to the gossip mesh
when our connections change, and an ask of each peer that joins the mesh. What to do when is
decided by upkeep.py's rules."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgpack
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from swarmp2p.net import upkeep
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.neighbours import NeighbourMap
from swarmp2p.net.peer_addrs import parse_peer_id
from swarmp2p.net.peer_book import PeerBook
from swarmp2p.net.request_response import RequestResponse, remote_peer
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.ports import NetworkError, ProtocolRefused

logger = logging.getLogger(__name__)

PEERS_PROTOCOL = TProtocol("/swarmp2p/peers/1.1.0")
PEERS_ASK_PROTOCOL = TProtocol("/swarmp2p/peers/1.0.0")

MAX_EXCHANGE_PEERS = 64
_MAX_ANSWER_BYTES = 64 * 1024
# A peer exchange request lists at most MAX_EXCHANGE_PEERS ids of ~52 base58 characters.
_MAX_EXCHANGE_REQUEST_BYTES = 8 * 1024
_TIMEOUT_S = 5.0


class PeerSurface(Protocol):
    """What peer exchange needs of the adapter: our connections, addresses and peer book."""

    book: PeerBook

    @property
    def local_peer_id(self) -> str: ...

    def connected_peers(self) -> Sequence[str]: ...

    def transport_addrs(self) -> list[str]: ...

    def add_known_peer(self, peer_id: str, addrs: Sequence[str], *, pinned: bool = False) -> bool: ...


class PeerExchange:
    """The peer exchange of one host: its protocols, its loops and what it learned
    (`neighbours`: whom each peer said it is connected to)."""

    def __init__(
        self,
        peers: PeerSurface,
        requests: RequestResponse,
        router: Any,
        settings: NetworkSettings,
        counters: DropCounters,
        nursery: trio.Nursery,
    ) -> None:
        self._peers = peers
        self._requests = requests
        self._router = router
        self.settings = settings
        self.counters = counters
        self._nursery = nursery
        # Whom each peer said (in peer exchange) it is connected to: the gossip router skips
        # relaying to those that hold the author's flood publish already (net/neighbours.py).
        self.neighbours = NeighbourMap(settings.neighbour_ttl_s, max_peers=settings.max_known_peers)
        # Peers that failed a peer exchange (e.g. a foreign libp2p node without our protocol):
        # peer id -> trio time before which we do not ask them again.
        self.quiet_until: dict[str, float] = {}
        # The loop slows down while it teaches us nothing new (see `run`).
        self._interval_s = settings.peer_exchange_fast_s
        self._cursor = 0
        # What we last told our mesh peers we are connected to (`maybe_tell_mesh_peers`).
        self._told_connected: frozenset[str] = frozenset()
        self._told_at = -math.inf
        self._telling = False
        # Mesh peers that joined and are being asked whom they are connected to (`on_mesh_join`).
        self.asking_joiners: set[str] = set()
        requests.host.set_stream_handler(PEERS_PROTOCOL, self._serve_peer_exchange)
        requests.host.set_stream_handler(PEERS_ASK_PROTOCOL, self._serve_peers)

    # ---- asking ---------------------------------------------------------------------------------

    async def exchange_peers(self, peer_id: str) -> int:
        """Tell `peer_id` whom we are connected to and ask whom it is connected to; returns
        how many new peers we learned."""
        roundtrip = self._requests.roundtrip
        try:
            try:
                request = self._encode_connected_ids()
                raw = await roundtrip(peer_id, PEERS_PROTOCOL, request, _MAX_ANSWER_BYTES, _TIMEOUT_S)
            except ProtocolRefused:  # a peer of the first version: ask only
                raw = await roundtrip(peer_id, PEERS_ASK_PROTOCOL, b"", _MAX_ANSWER_BYTES, _TIMEOUT_S)
        except NetworkError as error:
            logger.debug("peer exchange with %s failed: %s", peer_id, error)
            pause = upkeep.exchange_failure_pause(refused=isinstance(error, ProtocolRefused))
            self.quiet_until[peer_id] = trio.current_time() + pause
            return 0
        entries = self._unpack_exchange_list(raw)
        if entries is None:
            entries = []  # below: it told us no neighbours (so every relay to it is sent)
        learned = 0
        # The answer lists the peers it is connected to (`_encode_peer_exchange`).
        its_neighbours: list[bytes] = []
        for entry in entries[:MAX_EXCHANGE_PEERS]:
            pid = parse_peer_id(entry[0]) if isinstance(entry, list) and entry else None
            if pid is None or len(entry) != 2 or not isinstance(entry[1], list):
                self.counters.add("peer_exchange_garbage")
                continue
            its_neighbours.append(pid.to_bytes())
            learned += self._peers.add_known_peer(entry[0], entry[1][:8])
        asked = parse_peer_id(peer_id)
        if asked is not None:
            self.neighbours.learn(asked.to_bytes(), its_neighbours)
        return learned

    async def run(self) -> None:
        """Ask one connected peer at a time whom it knows. Fast while it teaches us something
        (joining converges in seconds), then doubling up to `peer_exchange_interval_s`: every
        exchange opens a stream (multistream negotiation + yamux frames), and a settled swarm
        asking every 0.5 s spent a measurable share of its CPU on nothing new."""
        while True:
            now = trio.current_time()
            for peer_id in upkeep.ended_pauses(self.quiet_until, now):
                del self.quiet_until[peer_id]
            connected = self._peers.connected_peers()
            askable = upkeep.askable(connected, self.quiet_until, now)
            mesh_peer, next_refresh_s = self._mesh_peer_to_refresh(askable)
            target, self._cursor = upkeep.next_exchange_target(askable, mesh_peer, self._cursor)
            learned = await self.exchange_peers(target) if target is not None else 0
            self._interval_s = upkeep.next_exchange_interval(
                self._interval_s,
                learned=learned,
                connected=len(connected),
                fast_s=self.settings.peer_exchange_fast_s,
                slow_s=self.settings.peer_exchange_interval_s,
            )
            await trio.sleep(
                upkeep.exchange_loop_pause(
                    self._interval_s, fast_s=self.settings.peer_exchange_fast_s, next_refresh_s=next_refresh_s
                )
            )

    def mesh_members(self) -> set[ID]:
        """Every peer in our gossip mesh, over all topics."""
        members: set[ID] = set()
        for topic_mesh in getattr(self._router, "mesh", {}).values():
            members.update(topic_mesh)
        return members

    def _mesh_peer_to_refresh(self, askable: Sequence[str]) -> tuple[str | None, float]:
        """The gossip mesh peer whose neighbour list (net/neighbours.py) is the most overdue for
        a refresh (`NeighbourMap.due_in`), if any; and the seconds until the next one falls due
        (inf: none).
        Only mesh peers matter: they are the ones a relay sends to. Peers outside the mesh are
        left to the slow round-robin discovery."""
        if not self.settings.skip_relay_to_origin_neighbours:
            return None, math.inf
        due_in = {pid.to_base58(): self.neighbours.due_in(pid.to_bytes()) for pid in self.mesh_members()}
        return upkeep.mesh_peer_to_refresh(due_in, set(askable))

    # ---- telling --------------------------------------------------------------------------------

    def maybe_tell_mesh_peers(self, connected: set[str], *, still_changing: bool, now: float) -> None:
        """Start a peer exchange with every gossip mesh peer when our connections differ from
        what we last told them: once they have stopped changing for one upkeep tick, or
        `tell_neighbours_max_wait_s` after the last time while they keep changing.

        Our mesh peers are the relays that forward to us, and each skips us for the messages
        whose author it believes we are connected to (net/neighbours.py). Until it hears of a
        new connection of ours it relays us a copy the author sent us already. A swarm that
        had just formed lost most of its first round to such copies: at 20 processes ~800
        duplicates in the first round and none after; with the answers up to date the first
        round took ~0.25 s, like the others, against ~0.45 s (docs/benchmarks.md). The asks
        alone (`run`) come too late for that: they are paced by the asker."""
        if not self.settings.skip_relay_to_origin_neighbours or self._telling:
            return
        due = upkeep.tell_due(
            differs=connected != self._told_connected,
            still_changing=still_changing,
            since_last_s=now - self._told_at,
            max_wait_s=self.settings.tell_neighbours_max_wait_s,
        )
        if not due:
            return
        self._told_connected = frozenset(connected)
        self._told_at = now
        self._telling = True
        try:
            self._nursery.start_soon(self._tell_mesh_peers)
        except RuntimeError:
            self._telling = False  # shutting down, as in `on_mesh_join`

    async def _tell_mesh_peers(self) -> None:
        try:
            now = trio.current_time()
            connected = set(self._peers.connected_peers())
            mesh = {pid.to_base58() for pid in self.mesh_members()}
            async with trio.open_nursery() as nursery:
                for peer_id in sorted(mesh & connected):
                    if self.quiet_until.get(peer_id, 0.0) <= now:
                        nursery.start_soon(self.exchange_peers, peer_id)
        finally:
            self._telling = False

    def on_mesh_join(self, pid: ID) -> None:
        """A peer joined our gossip mesh (the router calls this): from now on we relay to it.
        Unless it told us whom it is connected to within `TELL_MIN_GAP_S`, one peer exchange
        with it now, which tells it ours and asks its list. Until we know its list, every
        message we relay goes to it as well, also those it holds from their authors already.

        The mesh forms and re-forms at heartbeats while a swarm joins. The peer exchange loop
        gets to a new mesh peer only in turn, one exchange each `peer_exchange_fast_s`, and a
        peer's own tells go to the mesh it had when its connections last changed; so a first
        round still carried 50-430 duplicate relays at 20 processes in some runs
        (docs/benchmarks.md)."""
        peer_id = pid.to_base58()
        ask = upkeep.should_ask_joiner(
            asking=peer_id in self.asking_joiners,
            answer_age_s=self.neighbours.age(pid.to_bytes()),
            quiet_until=self.quiet_until.get(peer_id, 0.0),
            now=trio.current_time(),
        )
        if not ask:
            return
        self.asking_joiners.add(peer_id)
        try:
            self._nursery.start_soon(self._ask_joiner, peer_id)
        except RuntimeError:
            # The network is shutting down: its nursery takes no new task while gossipsub still
            # runs its last ones. A peer that joins now is not asked (raising here failed the
            # network's exit with gossipsub's task error).
            self.asking_joiners.discard(peer_id)

    async def _ask_joiner(self, peer_id: str) -> None:
        try:
            await self.exchange_peers(peer_id)
        finally:
            self.asking_joiners.discard(peer_id)

    # ---- what upkeep asks of it ---------------------------------------------------------------

    def forget(self, peer_id: str) -> None:
        """A peer the book gave up on: no pause kept for it."""
        self.quiet_until.pop(peer_id, None)

    def prune_pauses(self, connected: set[str], in_book: PeerBook) -> None:
        """Forget the pauses of peers neither connected nor in the book."""
        for peer_id in upkeep.forgettable_pauses(self.quiet_until, connected, in_book):
            del self.quiet_until[peer_id]

    def relay_view(self) -> dict[str, int]:
        """How far our relays can skip the peers that hold a message from its author already
        (net/neighbours.py): `mesh_peers` in our gossip mesh, how many of them have told us whom
        they are connected to (`mesh_lists_known`), exchanges with mesh joiners still in flight
        (`asking`), and whether our mesh peers have been told our current connections
        (`told_current`, 0 or 1).

        A swarm that has just formed relays every message to the mesh peers whose lists are
        missing: at 20 processes, ~2,300 duplicates in a first round that came 2 s after every
        process was connected (docs/benchmarks.md). All lists known and ours told is when
        relays stop sending such copies; bench_network.py waits for it before its rounds."""
        mesh = self.mesh_members()
        known = sum(1 for pid in mesh if self.neighbours.age(pid.to_bytes()) is not None)
        told = not self._telling and self._told_connected == frozenset(self._peers.connected_peers())
        return {
            "mesh_peers": len(mesh),
            "mesh_lists_known": known,
            "asking": len(self.asking_joiners),
            "told_current": int(told),
        }

    # ---- serving and the wire format ----------------------------------------------------------

    async def _serve_peers(self, stream: Any) -> None:
        await self._requests.serve_small(stream, lambda _request: self._encode_peer_exchange())

    async def _serve_peer_exchange(self, stream: Any) -> None:
        asker = parse_peer_id(remote_peer(stream))

        def respond(request: bytes) -> bytes | None:
            told = self._decode_peer_ids(request)
            if told is None:
                return None
            if asker is not None:
                self.neighbours.learn(asker.to_bytes(), told)
            return self._encode_peer_exchange()

        await self._requests.serve_small(stream, respond, _MAX_EXCHANGE_REQUEST_BYTES)

    def _unpack_exchange_list(self, raw: bytes) -> list[Any] | None:
        """A peer exchange request or answer: a msgpack list of at most MAX_EXCHANGE_PEERS
        entries, or None (counted as `peer_exchange_garbage`) for anything else."""
        try:
            entries = msgpack.unpackb(
                raw, raw=False, strict_map_key=True, max_array_len=MAX_EXCHANGE_PEERS, max_map_len=0
            )
        except Exception:
            entries = None
        if not isinstance(entries, list):
            self.counters.add("peer_exchange_garbage")
            return None
        return entries

    def _decode_peer_ids(self, raw: bytes) -> list[bytes] | None:
        """A peer exchange request (`_encode_connected_ids`) -> the ids it lists, as bytes; None
        when it is not a list at all. Every rejection is counted as `peer_exchange_garbage`;
        an entry that is not a peer id is skipped."""
        names = self._unpack_exchange_list(raw)
        if names is None:
            return None
        ids = []
        for name in names:
            pid = parse_peer_id(name)
            if pid is None:
                self.counters.add("peer_exchange_garbage")
            else:
                ids.append(pid.to_bytes())
        return ids

    def _encode_connected_ids(self) -> bytes:
        return msgpack.packb(sorted(self._peers.connected_peers())[:MAX_EXCHANGE_PEERS])

    def _encode_peer_exchange(self) -> bytes:
        entries = [[self._peers.local_peer_id, self._peers.transport_addrs()]]
        connected = set(self._peers.connected_peers())
        entries.extend(_connected_entries(self._peers.book.known(), connected, MAX_EXCHANGE_PEERS - 1))
        return msgpack.packb(entries)


def _connected_entries(
    known: Iterable[tuple[str, Sequence[str]]], connected: set[str], limit: int
) -> list[list[Any]]:
    """The (peer id, addrs) entries of an answer: book peers we are connected to whose
    addresses we know, at most `limit`."""
    entries: list[list[Any]] = []
    for peer_id, addrs in known:
        if len(entries) >= limit:
            break
        if peer_id in connected and addrs:
            entries.append([peer_id, list(addrs)])
    return entries
