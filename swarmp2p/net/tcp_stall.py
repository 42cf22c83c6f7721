"""Connections stalled in TCP retransmission backoff, as after a network partition heals.

While a path drops everything, the retransmission timeout of the oldest unacknowledged segment
doubles at each try. When the path comes back, the connection stays silent until its next
retransmission, up to about the cut's length later, while a new connection works at once
(docs/reliability.md, `python netlab/netns_harness.py stall [--libp2p]`: after a 30 s cut,
requests over the old libp2p connection were answered 12-13 s after the heal). A 5 s fetch
over such a connection fails round after round. So a request that times out on a connection
whose kernel reports STALLED_EXPIRATIONS unanswered timer expirations in a row closes it, and
the next request dials a fresh one.

Which counter: `tcpi_backoff` also grows while a healthy peer is only slow to read. Its window
is then zero, the kernel sends zero-window probes, the peer answers each with "still zero", and
every probe doubles the interval and counts in `tcpi_backoff` (measured on loopback: 3 within
2 s, with nothing lost). Closing such a connection after a request timed out threw away working
connections of busy peers, exactly when a swarm was overloaded. So a stall is counted by what
went unanswered: `tcpi_retransmits` (retransmission timeouts of unacknowledged data) or
`tcpi_probes` (zero-window probes nobody answered), both reset by any acknowledgement.
"""

from __future__ import annotations

import socket
from typing import Any

STALLED_EXPIRATIONS = 3
"""Unanswered timer expirations in a row that mark a connection stalled: nothing acknowledged
for about 7 RTOs (2 s or more). Random loss rarely does that (the same segment lost three times
running: at 10% loss, 1 in 1,000 losses)."""

# struct tcp_info (linux/tcp.h): state, ca_state, retransmits, probes, backoff, ... (u8 each)
_RETRANSMITS_OFFSET = 2
_PROBES_OFFSET = 3
_BACKOFF_OFFSET = 4


def tcp_info_counts(sock: Any) -> dict[str, int] | None:
    """`retransmits`, `probes` and `backoff` from a TCP socket's TCP_INFO (a `socket.socket` or a
    trio socket), or None where it cannot be read (a closed socket, no TCP_INFO here)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _BACKOFF_OFFSET + 1)
    except (AttributeError, OSError):
        return None
    if len(info) <= _BACKOFF_OFFSET:
        return None
    return {
        "retransmits": info[_RETRANSMITS_OFFSET],
        "probes": info[_PROBES_OFFSET],
        "backoff": info[_BACKOFF_OFFSET],
    }


def socket_stalled(sock: Any) -> bool:
    """Data or zero-window probes unanswered STALLED_EXPIRATIONS times in a row (not a peer that
    answers but reads slowly)."""
    counts = tcp_info_counts(sock)
    if counts is None:
        return False
    return max(counts["retransmits"], counts["probes"]) >= STALLED_EXPIRATIONS


def tcp_socket_of(conn: Any) -> Any:
    """A py-libp2p connection's TCP socket (SwarmConn → muxer → secure session → raw connection
    → trio socket), or None where there is none (another transport or layering)."""
    try:
        return conn.muxed_conn.secured_conn.conn.conn.stream.stream.socket
    except AttributeError:
        return None


def is_stalled(conn: Any) -> bool:
    sock = tcp_socket_of(conn)
    return sock is not None and socket_stalled(sock)
