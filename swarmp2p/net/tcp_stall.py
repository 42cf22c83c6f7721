"""Connections stalled in TCP retransmission backoff, as after a network partition heals.

While a path drops everything, the retransmission timeout of the oldest unacknowledged segment
doubles at each try. When the path comes back, the connection stays silent until its next
retransmission, up to about the cut's length later, while a new connection works at once
(docs/reliability.md, `python tests/netns_harness.py stall [--libp2p]`: after a 30 s cut,
requests over the old libp2p connection were answered 12-13 s after the heal). A 5 s fetch
over such a connection fails round after round. So a request that times out on a connection
whose kernel reports STALLED_BACKOFF or more expirations in a row closes it, and the next
request dials a fresh one.
"""

from __future__ import annotations

import socket
from typing import Any

STALLED_BACKOFF = 3
"""Retransmission timer expirations in a row (TCP_INFO `tcpi_backoff`) that mark a connection
stalled: nothing acknowledged for about 7 RTOs (2 s or more). Random loss rarely does that (the
same segment lost three times running: at 10% loss, 1 in 1,000 losses)."""

_BACKOFF_OFFSET = 4  # struct tcp_info: state, ca_state, retransmits, probes, backoff, ...


def tcp_backoff(conn: Any) -> int | None:
    """`tcpi_backoff` of a py-libp2p connection's TCP socket (SwarmConn → muxer → secure
    session → raw connection → trio socket), or None where there is none to read (another
    transport or layering, a closed socket, no TCP_INFO on this platform)."""
    try:
        sock = conn.muxed_conn.secured_conn.conn.conn.stream.stream.socket
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _BACKOFF_OFFSET + 1)
    except (AttributeError, OSError):
        return None
    return info[_BACKOFF_OFFSET] if len(info) > _BACKOFF_OFFSET else None


def is_stalled(conn: Any) -> bool:
    backoff = tcp_backoff(conn)
    return backoff is not None and backoff >= STALLED_BACKOFF
