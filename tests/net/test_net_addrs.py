"""A node listening on every interface hands out addresses others can dial, never 0.0.0.0."""

from __future__ import annotations

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.net.listen_check import check_listen_addrs_free
from swarmp2p.net.peer_addrs import dialable_addrs

PEER = "12D3KooWLecEtuJ1pFCT32PCMEL3rqcPcwB1Tc6KfXK6Un7ah5he"


def test_wildcards_expand_concrete_addresses_stay_and_p2p_is_stripped() -> None:
    addrs = dialable_addrs(
        [
            "/ip4/0.0.0.0/tcp/4001",
            "/ip4/127.0.0.1/tcp/4002",
            f"/ip4/127.0.0.1/tcp/4002/p2p/{PEER}",  # the same transport address: listed once
            "/dns4/example.com/tcp/4003",
        ]
    )
    assert addrs[1:] == ["/ip4/127.0.0.1/tcp/4002", "/dns4/example.com/tcp/4003"]
    assert addrs[0].startswith("/ip4/") and addrs[0].endswith("/tcp/4001")
    assert "0.0.0.0" not in addrs[0]


def test_a_node_bound_to_all_interfaces_is_joinable_through_its_listed_address() -> None:
    async def main() -> None:
        with trio.fail_after(30):
            wide = NetworkSettings(listen=("/ip4/0.0.0.0/tcp/0",))
            async with (
                open_libp2p_network(create_new_key_pair(), wide) as server,
                open_libp2p_network(create_new_key_pair(), NetworkSettings()) as joiner,
            ):
                listed = server.listen_addrs()
                assert listed and not any("/0.0.0.0/" in addr for addr in listed), listed
                assert all(addr.endswith(f"/p2p/{server.local_peer_id}") for addr in listed)
                # What the join command prints (and hellos carry) actually reaches the node.
                await joiner.connect(listed[0])
                assert server.local_peer_id in joiner.connected_peers()

    trio.run(main)


def test_a_fixed_listen_port_held_by_another_node_is_refused_and_free_once_it_stops() -> None:
    async def main() -> str:
        with trio.fail_after(30):
            async with open_libp2p_network(create_new_key_pair(), NetworkSettings()) as running:
                transport = running.transport_addrs()[0]  # /ip4/127.0.0.1/tcp/<port>
                # py-libp2p itself would share the port (SO_REUSEPORT); the check refuses it.
                with pytest.raises(ValueError, match=r"cannot listen on .*in use"):
                    check_listen_addrs_free([transport])
                check_listen_addrs_free(["/ip4/127.0.0.1/tcp/0"])  # port 0: always fine
        return transport

    transport = trio.run(main)
    check_listen_addrs_free([transport])  # the node stopped: a restart on its port is fine
