"""Building the py-libp2p host a swarm node runs: its connection manager settings, the
per-RPC shortcuts installed into py-libp2p, gossipsub and the Kademlia DHT on it. Running the
host and the adapter's loops on it is adapter.py's `open_libp2p_network`."""

from __future__ import annotations

from typing import Any

import attrs
import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.kad_dht import KadDHT
from libp2p.network.auto_connector import AutoConnector
from libp2p.network.config import ConnectionConfig

from swarmp2p.net import inbound_slots, task_parents, yamux_credit, yamux_knobs
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.dht import SwarmRecordValidator, build_dht
from swarmp2p.net.gossip import CountingPubsub, build_gossip
from swarmp2p.net.peer_addrs import parse_peer_multiaddr
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.net.signed_records import install as memoize_signed_records
from swarmp2p.net.tcp_recovery import LossRecoveryTuner


@attrs.frozen
class BuiltHost:
    """A host not yet running, with what runs on it."""

    host: IHost
    listen: list[multiaddr.Multiaddr]
    counters: DropCounters
    pubsub: CountingPubsub
    dht: KadDHT
    record_validator: SwarmRecordValidator


def check_addresses(settings: NetworkSettings) -> list[multiaddr.Multiaddr]:
    """The listen multiaddrs; raises ValueError with a clear message for a bad listen or
    bootstrap address, before anything starts."""
    try:
        listen = [multiaddr.Multiaddr(addr) for addr in settings.listen]
    except Exception as error:
        raise ValueError(f"bad listen multiaddr in {settings.listen!r}: {error}") from error
    for text in settings.bootstrap:
        parse_peer_multiaddr(text)
    return listen


def build_host(key_pair: KeyPair, settings: NetworkSettings) -> BuiltHost:
    """A host listening (once run) on `settings.listen`, with gossip and DHT configured."""
    listen = check_addresses(settings)
    counters = DropCounters()
    # Per-RPC costs of py-libp2p that redo known work: yamux credit, yamux's environment knobs,
    # the service manager's parent-task walk and signed peer records (each module says what and why).
    yamux_credit.install()
    yamux_knobs.install()
    task_parents.install()
    # Inbound connection slots held until the host stops, not until the connection closes.
    inbound_slots.install()
    if settings.libp2p_default_connection_manager:
        host = new_host(key_pair=key_pair, listen_addrs=listen)
    else:
        host = new_host(key_pair=key_pair, listen_addrs=listen, connection_config=connection_config(settings))
    configure_connection_manager(host, settings)
    if settings.tcp_rto_min_ms:
        host.get_network().register_notifee(
            LossRecoveryTuner(counters, settings.tcp_rto_min_ms, settings.tcp_delack_max_ms)
        )
    memoize_signed_records().count_refusals(host, counters)
    pubsub = build_gossip(host, settings, counters)
    dht, record_validator = build_dht(
        host,
        settings.dht_namespace,
        settings.max_dht_value_bytes,
        counters,
        record_ttl_s=settings.dht_record_ttl_s,
        max_records=settings.max_dht_records,
        max_bytes=settings.max_dht_bytes,
        max_records_per_owner=settings.max_dht_records_per_owner,
        max_bytes_per_owner=settings.max_dht_bytes_per_owner,
        stream_idle_s=settings.dht_stream_idle_s,
    )
    return BuiltHost(host, listen, counters, pubsub, dht, record_validator)


def connection_config(settings: NetworkSettings) -> ConnectionConfig:
    """py-libp2p's connection manager settings for a swarm node (see NetworkSettings).

    min_connections 0: below it the AutoConnector (when on) polls every 10 s instead of every
    `auto_connect_interval`, and the inbound limiter reserves that many slots for its dials."""
    return ConnectionConfig(
        max_connections=settings.max_connections,
        min_connections=0,
        low_watermark=settings.conn_low_watermark,
        high_watermark=settings.conn_high_watermark,
        dial_timeout=settings.dial_timeout_s,
    )


class UpkeepOwnsDialing(AutoConnector):
    """py-libp2p's AutoConnector with its dialing switched off: `LibP2PNetwork._upkeep_loop`
    owns dialing (peer book, pinned bootstrap peers, per-peer backoff, stale-connection cleanup).

    The stock one ran `maybe_connect` every 10 s and after every disconnect, scanned the
    peerstore and logged "initiating N new dials" at INFO each time, in every node process.
    Bookkeeping calls (`record_disconnect`, cooldowns) keep working, so py-libp2p code that
    calls them is unaffected."""

    async def run_background_task(self, nursery: trio.Nursery) -> None:
        return

    async def maybe_connect(self) -> None:
        return


def configure_connection_manager(host: IHost, settings: NetworkSettings) -> None:
    """Swap in the dial-less AutoConnector before the host runs (the swarm starts whatever
    `auto_connector` holds when `host.run` begins)."""
    if settings.libp2p_default_connection_manager or settings.libp2p_auto_connect:
        return
    swarm = host.get_network()
    config = getattr(swarm, "connection_config", None)
    interval = getattr(config, "auto_connect_interval", 30.0)
    swarm.auto_connector = UpkeepOwnsDialing(swarm, auto_connect_interval=interval)  # type: ignore[attr-defined]


def quiet_auto_connector(host: Any) -> None:
    """Keep py-libp2p's auto-connector from dialing while we shut down.

    In py-libp2p 0.8.1 the disconnects caused by our own teardown trigger the auto-connector,
    which then starts dials in a nursery that is already closing and fails the whole host with
    "Nursery is closed to new arrivals" (seen as a rare teardown error in CI). Its trigger is a
    no-op while it believes a connect round is in progress, so mark it so.
    """
    auto_connector = getattr(host.get_network(), "auto_connector", None)
    if auto_connector is not None:
        auto_connector._is_connecting = True
