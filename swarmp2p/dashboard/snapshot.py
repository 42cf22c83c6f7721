"""The node's status, published as immutable snapshots for a dashboard served on another thread.

The node's status is read from live objects (the peer, the network) that only its trio thread
may touch, and building it costs milliseconds; a request answered on that thread waits behind
whatever the node is busy with (a gossip flood: hundreds of milliseconds). So the trio thread
builds the status at a steady cadence (`StatusPublisher.run`, and at once on `refresh()`: each
round's end), normalises it into a fresh JSON-safe copy that no one mutates afterwards, and puts
it in a `SnapshotHolder`; the dashboard's thread answers every request from the latest one.

`SnapshotHolder.status()` is a `StatusSource` for `build_app`: the snapshot plus
`status_age_s` (seconds since it was built) and `status_built_at` (unix seconds), so a reader
can tell a node whose loop is stuck (an age that keeps growing) from a live one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from swarmp2p.dashboard.status import StatusSource, StatusUnavailable, read_status

DEFAULT_INTERVAL_S = 0.5


@attrs.frozen
class Snapshot:
    """One status as built on the node's thread: `status` is normalised (a deep, JSON-safe copy)
    and never mutated after publishing; `error` is the one-line failure when the source failed."""

    status: Mapping[str, Any] | None
    error: str
    built_monotonic: float
    built_unix: float


class SnapshotHolder:
    """The latest snapshot, shared between the publishing thread and the serving thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._latest = snapshot

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._latest

    def status(self) -> dict[str, Any]:
        """The latest status with its age (a shallow copy: the dashboard replaces top-level keys
        such as `history` and `view` per request and never edits nested values)."""
        snapshot = self.latest()
        if snapshot is None:
            raise StatusUnavailable("no status published yet")
        if snapshot.status is None:
            raise StatusUnavailable(snapshot.error)
        return {**snapshot.status, **age_fields(snapshot)}


def age_fields(snapshot: Snapshot, now: float | None = None) -> dict[str, float]:
    age = (time.monotonic() if now is None else now) - snapshot.built_monotonic
    return {"status_age_s": round(max(0.0, age), 3), "status_built_at": round(snapshot.built_unix, 3)}


class StatusPublisher:
    """Builds the status on the trio thread every `interval_s` (and on `refresh()`) into `holder`."""

    def __init__(
        self,
        source: StatusSource,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        holder: SnapshotHolder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.holder = holder if holder is not None else SnapshotHolder()
        self.failures = 0
        self._clock = clock
        self._wake = trio.Event()

    def refresh(self) -> None:
        """Publish a new snapshot now (call on the trio thread: a round has just ended)."""
        self._wake.set()

    async def publish_once(self) -> Snapshot:
        try:
            status: dict[str, Any] | None = await read_status(self.source)
            error = ""
        except Exception as failure:  # a broken source must not stop the publishing
            self.failures += 1
            status, error = None, " ".join(f"{type(failure).__name__}: {failure}".split())[:300]
        snapshot = Snapshot(status=status, error=error, built_monotonic=self._clock(), built_unix=time.time())
        self.holder.publish(snapshot)
        return snapshot

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish until cancelled; `started` once the first snapshot is in the holder, so a
        server started after it never answers "no status yet"."""
        await self.publish_once()
        task_status.started()
        while True:
            with trio.move_on_after(self.interval_s):
                await self._wake.wait()
            self._wake = trio.Event()
            await self.publish_once()
