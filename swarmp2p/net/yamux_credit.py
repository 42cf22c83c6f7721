"""Yamux receive-window credit returned in batches, as go-yamux does, not after every read.

py-libp2p 0.8.1's yamux sends a WINDOW_UPDATE frame after every read of a stream by default
(`PY_YAMUX_RELEASE_ON_READ=1`): each gossip RPC read costs the reader one more frame through
noise encryption and a socket write, and the sender one more read, decryption and dispatch.
go-yamux (and py-libp2p with that knob at 0) returns the credit once half the receive window
is consumed: with its 256 KiB window, one update per ~128 KiB read instead of one per RPC. At
20 processes exchanging 10 KB batches the per-read updates were ~15% of a process's py-spy
samples, and batching them took a fifth off its CPU (docs/benchmarks.md).

The knob is an environment variable that py-libp2p reads at each window update, so it is set
for the whole process. A value the user set is left as it is (`PY_YAMUX_RELEASE_ON_READ=1`
brings the per-read updates back).
"""

from __future__ import annotations

import os

ENV = "PY_YAMUX_RELEASE_ON_READ"


def batch_window_updates() -> str:
    """Turn off py-libp2p's per-read window updates unless the user chose; returns the value in force."""
    return os.environ.setdefault(ENV, "0")
