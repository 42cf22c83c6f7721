"""Refuse a listen address another process already listens on, before py-libp2p shares it.

py-libp2p 0.8.1 opens its TCP listeners with SO_REUSEPORT (for hole punching), so a second node
told to listen on a port in use does NOT fail: both processes hold the port and the kernel splits
inbound connections between them — peers reach a random one of the two. A plain bind (no
SO_REUSEPORT) fails on a port anyone listens on, so probing with one turns that into a clear
error at start-up. SO_REUSEADDR on the probe keeps a restart on the same port working while
the previous run's connections sit in TIME_WAIT.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import multiaddr
from multiaddr.protocols import P_IP4, P_IP6, P_TCP


def check_listen_addrs_free(listen: Sequence[str]) -> None:
    """Raise ValueError naming the first fixed-port TCP listen address that is in use."""
    for text in listen:
        ma = multiaddr.Multiaddr(text)
        codes = [protocol.code for protocol in ma.protocols()]
        if P_TCP not in codes or not ({P_IP4, P_IP6} & set(codes)):
            continue
        port = int(ma.value_for_protocol(P_TCP))
        if port == 0:  # the OS picks a free one
            continue
        family, ip_code = (socket.AF_INET6, P_IP6) if P_IP6 in codes else (socket.AF_INET, P_IP4)
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((ma.value_for_protocol(ip_code), port))
            except OSError as error:
                reason = error.strerror or str(error)
                raise ValueError(f"cannot listen on {text}: {reason} (another swarmp2p node?)") from None
