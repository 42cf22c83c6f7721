"""The hello protocol: how a node tells the swarm who it is, where it listens and which schedule
(and rules) its swarm follows.

- A Hello is sealed (signed) by its peer and carries the swarm's schedule, the current round and
  listen addresses. A node serves its latest one over a request/response protocol (a joiner asks
  its bootstrap peers: `learn_schedule`) and gossips it on the swarm's hello topic every few
  seconds (`publish_hellos`), so nobody depends on one bootstrap to find the others
  (`receive_hellos` adds every sender to the peer book).
- `open_hello` verifies one: envelope, signer, type and protocol version. A peer speaking another
  protocol version is a VersionMismatch (final: waiting does not help).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from swarmp2p.node_config import NodeError

log = logging.getLogger("swarmp2p.node")


def hello_topic(swarm_id: str) -> str:
    return f"swarmp2p/{swarm_id}/hello"


def spoken_version(data: bytes) -> str:
    """The protocol version a sealed message says it speaks (envelope, else inner message)."""
    from protocol.codec import unpack_strict
    from protocol.errors import ProtocolError
    from protocol.messages import PROTOCOL_VERSION

    bounds = {"max_bin_len": 64 * 1024, "max_str_len": 64 * 1024, "max_array_len": 1024, "max_map_len": 64}
    try:
        frame = unpack_strict(data, **bounds)
        version = frame.get("v") if isinstance(frame, dict) else None
        if version == PROTOCOL_VERSION and isinstance(frame.get("m"), bytes):
            inner = unpack_strict(frame["m"], **bounds)
            version = inner.get("v") if isinstance(inner, dict) else None
    except ProtocolError:
        return "?"
    return str(version) if isinstance(version, int) and not isinstance(version, bool) else repr(version)[:20]


class VersionMismatch(ValueError):
    """A peer speaks another protocol version: nothing it sends can be understood."""


def open_hello(data: bytes, expected_signer: str | None) -> Any:
    """Verify a sealed Hello; returns it or raises ValueError with the reason (VersionMismatch,
    "peer speaks protocol N, we speak M", when the peer speaks another protocol version)."""
    from protocol.envelope import open_envelope
    from protocol.errors import ProtocolError
    from protocol.messages import PROTOCOL_VERSION, Hello

    try:
        opened = open_envelope(data, max_size=64 * 1024)
    except ProtocolError as error:
        if error.reason == "bad_version":
            raise VersionMismatch(
                f"peer speaks protocol {spoken_version(data)}, we speak {PROTOCOL_VERSION}"
            ) from None
        raise ValueError(f"bad hello envelope: {error}") from None
    hello = opened.message
    if not isinstance(hello, Hello):
        raise ValueError(f"expected a hello, got {type(hello).__name__}")
    if expected_signer is not None and opened.signer != expected_signer:
        raise ValueError(f"hello signed by {opened.signer}, expected {expected_signer}")
    if hello.protocol_version != PROTOCOL_VERSION:
        raise VersionMismatch(f"peer speaks protocol {hello.protocol_version}, we speak {PROTOCOL_VERSION}")
    return hello


async def learn_schedule(network: Any, bootstrap: tuple[str, ...], timeout_s: float) -> Any:
    """Ask bootstrap peers for their signed Hello until one answers; returns its schedule."""
    from swarmp2p.net import HELLO_PROTOCOL, parse_peer_multiaddr
    from swarmp2p.ports import NetworkError, ProtocolRefused

    peers = [parse_peer_multiaddr(addr)[0] for addr in bootstrap]
    last_error = "no answer"
    with trio.move_on_after(timeout_s):
        while True:
            for peer_id in list(peers):
                try:
                    raw = await network.request_hello(peer_id, timeout_s=5.0)
                except ProtocolRefused:
                    # Reachable but not serving hellos: not a swarmp2p node. Final, like a version
                    # mismatch: fail now once no bootstrap peer is left.
                    peers.remove(peer_id)
                    last_error = f"bootstrap {peer_id} does not serve {HELLO_PROTOCOL}"
                    if not peers:
                        raise NodeError(f"{last_error}; is it a swarmp2p node?") from None
                    continue
                except NetworkError as error:
                    last_error = str(error)
                    continue
                if not raw:
                    last_error = f"{peer_id} has no hello yet"
                    continue
                try:
                    hello = open_hello(raw, peer_id)
                except VersionMismatch as error:
                    # Permanent: waiting will not help. Fail now once no bootstrap peer is left.
                    peers.remove(peer_id)
                    last_error = f"bootstrap {peer_id}: {error}"
                    if not peers:
                        raise NodeError(f"{last_error}; run the same swarmp2p version as the swarm") from None
                    continue
                except ValueError as error:
                    last_error = str(error)
                    continue
                network.add_known_peer(hello.peer_id, hello.listen_addrs)
                return hello.schedule
            await trio.sleep(1.0)
    raise NodeError(
        f"could not learn the swarm schedule from {', '.join(bootstrap)} in {timeout_s:.0f}s: {last_error}"
    )


@attrs.frozen
class OwnHello:
    """Builds this node's sealed Hello afresh on each call: the round and listen addresses move."""

    identity: Any
    """swarmp2p.identity.Identity: the peer id and the seed that signs."""
    network: Any
    schedule: Any
    model: str
    current_round: Callable[[], int]

    def __call__(self) -> bytes:
        from protocol.envelope import seal
        from protocol.messages import PROTOCOL_VERSION, Hello

        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            peer_id=self.identity.peer_id,
            schedule=self.schedule,
            current_round=max(0, self.current_round()),
            listen_addrs=tuple(self.network.listen_addrs()),
            model=self.model[:64],
        )
        return seal(hello, self.identity.seed)


async def open_hellos(
    network: Any,
    own_hello: Callable[[], bytes],
    *,
    swarm_id: str,
    current_round: Callable[[], int],
    max_announce_bytes: int,
) -> tuple[Any, dict[str, int]]:
    """Serve our hello, subscribe to the swarm's hellos and install the gossip checks (gossip that
    fails them is never relayed; stale and replayed hellos are refused): (the hello channel for
    `receive_hellos`, the hello counters it and the checks keep)."""
    from swarmp2p.net.checks import install_gossip_checks
    from swarmp2p.peer import announce_topic

    network.set_hello(own_hello())
    hellos = await network.subscribe(hello_topic(swarm_id))
    stats: dict[str, int] = {"hellos_accepted": 0, "hellos_rejected": 0}
    install_gossip_checks(
        network,
        swarm_id=swarm_id,
        hello_topic=hello_topic(swarm_id),
        announce_topic=announce_topic(swarm_id),
        current_round=current_round,
        open_hello=open_hello,
        hello_stats=stats,
        max_announce_bytes=max_announce_bytes,
    )
    return hellos, stats


async def publish_hellos(
    network: Any, make_hello: Callable[[], bytes], swarm_id: str, interval_s: float
) -> None:
    from swarmp2p.ports import NetworkError

    topic = hello_topic(swarm_id)
    while True:
        hello = make_hello()
        network.set_hello(hello)
        try:
            await network.publish(topic, hello)
        except NetworkError as error:
            log.debug("hello publish failed: %s", error)
        await trio.sleep(interval_s)


async def receive_hellos(
    network: Any, channel: Any, stats: dict[str, int], schedule: Any, echo: Callable[[str], None]
) -> None:
    """Learn where peers listen from their signed hellos (so nobody depends on one bootstrap), and
    say once per peer when one follows other scoring rules than ours: on a chain (the contract
    carries no rules) that is two operators' configs differing, and every batch between us
    would be rejected as forged."""
    from swarmp2p.rules import differing_rules

    warned: set[str] = set()
    async for message in channel:
        try:
            hello = open_hello(message.data, message.transport_sender)
        except ValueError as error:
            stats["hellos_rejected"] += 1
            log.debug("rejected hello from %s: %s", message.transport_sender, error)
            continue
        stats["hellos_accepted"] += 1
        network.add_known_peer(hello.peer_id, hello.listen_addrs)
        differing = differing_rules(schedule, hello.schedule)
        if differing and hello.peer_id not in warned:
            warned.add(hello.peer_id)
            stats["peers_with_other_rules"] = len(warned)
            echo(
                f"peer {hello.peer_id} follows other swarm rules ({', '.join(differing)}): "
                "its batches and ours will be rejected as forged; give every peer the same "
                "[trainer] tasks/weights/format_reward/difficulty and [node] questions_per_round"
            )
