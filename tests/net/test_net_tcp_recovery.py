"""Shorter TCP loss recovery on every libp2p connection (swarmp2p/net/tcp_recovery.py): both
ends of a real connection carry the configured retransmission floor and delayed-ACK ceiling,
and a socket that refuses them (a kernel before 6.15) is counted, not fatal."""

from __future__ import annotations

import socket
from typing import Any

import attrs
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from swarmp2p.net import NetworkSettings, open_libp2p_network, tcp_recovery
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.tcp_recovery import (
    TCP_DELACK_MAX_US,
    TCP_RTO_MIN_US,
    LossRecoveryTuner,
    shorten_loss_recovery,
)
from swarmp2p.net.tcp_stall import tcp_socket_of


def kernel_has_the_options() -> bool:
    with socket.socket() as probe:
        return shorten_loss_recovery(probe, 50, 20)


def sockets_of(net: Any) -> list[Any]:
    conns = [c for peer_conns in net.host.get_network().connections.values() for c in peer_conns]
    return [s for s in map(tcp_socket_of, conns) if s is not None]


def option_ms(sock: Any, option: int) -> float:
    return sock.getsockopt(socket.IPPROTO_TCP, option) / 1000


def acted(net: Any) -> bool:
    """The tuner has set each socket's floor below the kernel's 200 ms, or counted a refusal."""
    if net.counters["tcp_recovery_unsupported"]:
        return True
    return all(option_ms(s, TCP_RTO_MIN_US) < 200 for s in sockets_of(net))


@pytest.mark.parametrize("rto_min_ms", [50.0, 0.0])
def test_both_ends_of_a_connection_recover_on_the_configured_floor(rto_min_ms: float) -> None:
    settings = attrs.evolve(NetworkSettings(), tcp_rto_min_ms=rto_min_ms, tcp_delack_max_ms=20.0)
    found: dict[str, list[tuple[float, float]]] = {}
    unsupported: list[int] = []

    async def main() -> None:
        with trio.fail_after(30):
            async with (
                open_libp2p_network(create_new_key_pair(), settings) as a,
                open_libp2p_network(create_new_key_pair(), settings) as b,
            ):
                await b.connect(a.listen_addrs()[0])
                for name, net in (("dialer", b), ("listener", a)):
                    # The notifee runs as the connection is added: poll until it has acted
                    # (with 0 there is none, and nothing to wait for).
                    while not sockets_of(net) or not (rto_min_ms == 0 or acted(net)):
                        await trio.sleep(0.05)
                    found[name] = [
                        (option_ms(s, TCP_RTO_MIN_US), option_ms(s, TCP_DELACK_MAX_US))
                        for s in sockets_of(net)
                    ]
                    unsupported.append(net.counters["tcp_recovery_unsupported"])

    trio.run(main)
    if not kernel_has_the_options():
        assert unsupported == ([1, 1] if rto_min_ms else [0, 0])
        return
    assert unsupported == [0, 0]
    for name, options in found.items():
        for rto_ms, delack_ms in options:
            if rto_min_ms:
                # The kernel keeps whole jiffies: at most one tick (10 ms at HZ=100) above.
                assert 50 <= rto_ms <= 60 and 20 <= delack_ms <= 30, (name, options)
            else:
                assert rto_ms >= 200 and delack_ms >= 200, (name, options)  # the kernel's own


class Refusing:
    def setsockopt(self, *args: Any) -> None:
        raise OSError(92, "Protocol not available")


def test_a_socket_that_refuses_the_options_is_counted_and_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not shorten_loss_recovery(Refusing(), 50, 20)
    counters = DropCounters()
    tuner = LossRecoveryTuner(counters, 50, 20)
    # A TCP connection's socket refuses; any other connection has no TCP socket.
    monkeypatch.setattr(tcp_recovery, "tcp_socket_of", lambda conn: Refusing() if conn == "tcp" else None)
    trio.run(tuner.connected, None, "tcp")
    assert counters["tcp_recovery_unsupported"] == 1
    trio.run(tuner.connected, None, "quic")  # not TCP: nothing to tune, nothing counted
    assert counters["tcp_recovery_unsupported"] == 1


def test_the_settings_refuse_a_negative_floor_and_a_delayed_ack_past_it() -> None:
    with pytest.raises(ValueError):
        NetworkSettings(tcp_rto_min_ms=-1)
    with pytest.raises(ValueError, match="tcp_delack_max_ms"):
        NetworkSettings(tcp_rto_min_ms=20, tcp_delack_max_ms=20)
    NetworkSettings(tcp_rto_min_ms=0, tcp_delack_max_ms=20)  # off: the kernel's values, no check
