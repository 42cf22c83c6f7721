"""py-libp2p's yamux tuning knobs read once, not from the environment on every frame.

py-libp2p 0.8.1's yamux (`libp2p/stream_muxer/yamux/yamux.py`) reads its `PY_YAMUX_*`
environment variables through `os.getenv` each time it consults one: the receive-window
threshold on every read of a stream, the debug switch on every frame written and read. At 20
processes exchanging 10 KB batches those lookups (`_py_yamux_env`, `os.environ.__getitem__`) were
~3-5% of a process's py-spy samples.

`install()` reads each knob once, with py-libp2p's own parsing, and has yamux use that value. A
`PY_YAMUX_*` variable changed after the node has started is no longer seen; set them before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from libp2p.stream_muxer.yamux import yamux as _yamux

KNOBS = (
    "_perf_yamux_debug_enabled",
    "_yamux_disable_hysteresis",
    "_yamux_release_on_read",
    "_yamux_batch_threshold_divisor",
    "_yamux_data_read_timeout",
)
"""The knob readers of py-libp2p's yamux module that its hot paths call."""


def _constant(value: Any) -> Callable[[], Any]:
    def knob() -> Any:
        return value

    return knob


def install() -> None:
    """Read every knob once and have yamux use those values (idempotent)."""
    for name in KNOBS:
        reader = getattr(_yamux, name)
        if hasattr(reader, "__wrapped__"):  # already a value read once
            continue
        knob = _constant(reader())
        knob.__wrapped__ = reader  # type: ignore[attr-defined]
        setattr(_yamux, name, knob)
