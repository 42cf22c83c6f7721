"""Faster recovery of a lost packet on the swarm's TCP connections.

A round's batches travel as one burst: every peer sends its batch to every other at the same
moment, so the round ends only when the last of some hundreds of messages has arrived. On a lossy
path one of them nearly always lost a packet, and that message waited for the kernel's loss
recovery: a tail-loss probe after about two RTTs, or the retransmission timeout, which Linux
floors at srtt + 200 ms (`TCP_RTO_MIN`). At 100 ms RTT and 1% loss that was the round's slowest
delivery, up to 0.3-0.5 s after 90% of the round had arrived (docs/benchmarks.md,
`bench_network.py --netns --per-round`).

Linux 6.15 lets a socket choose its own floor (`TCP_RTO_MIN_US`) and its longest delayed ACK
(`TCP_DELACK_MAX_US`). We lower both on every connection the host makes or accepts: the
timeout stays srtt + 4 x the RTT's variation where that is larger, so a jittery path keeps a
long one. The delayed-ACK ceiling stays below the floor, so the receiver's own ACK timer
cannot make the sender retransmit for nothing. Where the kernel is older the options do not
exist; the connection keeps the defaults and the adapter counts it (`tcp_recovery_unsupported`).
"""

from __future__ import annotations

import socket
from typing import Any

from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from multiaddr import Multiaddr

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.tcp_stall import tcp_socket_of

TCP_RTO_MIN_US = getattr(socket, "TCP_RTO_MIN_US", 45)  # linux/tcp.h, since Linux 6.15
TCP_DELACK_MAX_US = getattr(socket, "TCP_DELACK_MAX_US", 46)


def shorten_loss_recovery(sock: Any, rto_min_ms: float, delack_max_ms: float) -> bool:
    """Set the socket's retransmission-timeout floor and delayed-ACK ceiling; False where the
    kernel does not have the options (or the socket is gone)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US, int(rto_min_ms * 1000))
        sock.setsockopt(socket.IPPROTO_TCP, TCP_DELACK_MAX_US, int(delack_max_ms * 1000))
    except (AttributeError, OSError):
        return False
    return True


class LossRecoveryTuner(INotifee):
    """A network notifee: each new connection's TCP socket gets the shorter recovery as it opens,
    or is counted where it cannot (`tcp_recovery_unsupported`)."""

    def __init__(self, counters: DropCounters, rto_min_ms: float, delack_max_ms: float) -> None:
        self.counters = counters
        self.rto_min_ms = rto_min_ms
        self.delack_max_ms = delack_max_ms

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        sock = tcp_socket_of(conn)
        if sock is None:
            return  # not a TCP connection (another transport): nothing to tune
        if not shorten_loss_recovery(sock, self.rto_min_ms, self.delack_max_ms):
            self.counters.add("tcp_recovery_unsupported")

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        pass

    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None:
        pass

    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None:
        pass
