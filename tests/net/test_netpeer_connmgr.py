"""py-libp2p's connection manager as the adapter configures it: watermarks sized from
`target_peers`, and no AutoConnector dialing next to our own upkeep."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.net.host_build import UpkeepOwnsDialing
from tests.helpers.waiting import wait_until

AUTO_CONNECTOR_LOGGER = "libp2p.network.auto_connector"


def test_watermarks_follow_target_peers_and_are_validated() -> None:
    settings = NetworkSettings(target_peers=8)
    limits = (settings.conn_low_watermark, settings.conn_high_watermark, settings.max_connections)
    assert limits == (16, 32, 40)
    wide = NetworkSettings(target_peers=8, conn_high_watermark=100, max_connections=100)
    assert wide.conn_high_watermark == 100
    with pytest.raises(ValueError, match="conn_low_watermark <= conn_high_watermark"):
        NetworkSettings(conn_low_watermark=50, conn_high_watermark=40)
    with pytest.raises(ValueError, match="max_connections"):
        NetworkSettings(target_peers=8, max_connections=20)
    with pytest.raises(ValueError, match="target_peers"):
        NetworkSettings(target_peers=8, conn_low_watermark=4)


def _auto_connector_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == AUTO_CONNECTOR_LOGGER]


def _run_pair(settings: NetworkSettings, check, ready=lambda a, b: True, observe_s: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    """Two hosts, b dialing a; `check(a, b)` once both see the connection and `ready(a, b)`
    holds, after a deliberate `observe_s` (a window for something that must NOT happen)."""

    async def main() -> None:
        with trio.fail_after(30):
            async with AsyncExitStack() as stack:
                a = await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings))
                b = await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings))
                await b.connect(a.listen_addrs()[0])
                await wait_until(
                    lambda: (
                        b.local_peer_id in a.connected_peers()
                        and a.local_peer_id in b.connected_peers()
                        and ready(a, b)
                    )
                )
                await trio.sleep(observe_s)
                check(a, b)

    trio.run(main)


def test_swarm_node_passes_its_config_and_libp2p_does_not_dial(caplog: pytest.LogCaptureFixture) -> None:
    settings = NetworkSettings(target_peers=4, upkeep_interval_s=0.2, libp2p_auto_connect=False)

    def check(a, b) -> None:  # type: ignore[no-untyped-def]
        for net in (a, b):
            swarm = net.host.get_network()
            assert isinstance(swarm.auto_connector, UpkeepOwnsDialing)
            config = swarm.connection_config
            assert (config.min_connections, config.low_watermark, config.high_watermark) == (0, 8, 16)
            assert config.max_connections == 20
        assert b.connected_peers() == [a.local_peer_id]  # our upkeep and connect() still dial

    with caplog.at_level(logging.INFO, logger=AUTO_CONNECTOR_LOGGER):
        # Deliberate: a few upkeep ticks in which a dialing AutoConnector would log (it does
        # at once when it runs: see the next test).
        _run_pair(settings, check, observe_s=0.5)
    assert not [line for line in _auto_connector_lines(caplog) if "new dials" in line or "STATE" in line]


def test_the_libp2p_default_still_selectable_for_the_bench(caplog: pytest.LogCaptureFixture) -> None:
    # The comparison mode really is py-libp2p's default: its AutoConnector wants 200 connections.
    settings = NetworkSettings(libp2p_default_connection_manager=True)

    def check(a, b) -> None:  # type: ignore[no-untyped-def]
        swarm = a.host.get_network()
        assert not isinstance(swarm.auto_connector, UpkeepOwnsDialing)
        assert swarm.connection_config.min_connections == 50

    with caplog.at_level(logging.INFO, logger=AUTO_CONNECTOR_LOGGER):
        _run_pair(
            settings, check, ready=lambda a, b: any("new dials" in x for x in _auto_connector_lines(caplog))
        )
    assert any("new dials" in line for line in _auto_connector_lines(caplog))


def test_by_default_libp2p_auto_connects_with_our_watermarks() -> None:
    def check(a, b) -> None:  # type: ignore[no-untyped-def]
        swarm = a.host.get_network()
        assert not isinstance(swarm.auto_connector, UpkeepOwnsDialing)
        config = swarm.connection_config
        assert (config.min_connections, config.low_watermark, config.high_watermark) == (0, 64, 128)

    _run_pair(NetworkSettings(), check)
