"""The node's status, published as immutable snapshots for a dashboard served on another thread.

The node's status is read from live objects (the peer, the network) that only its trio thread
may touch, and building it costs milliseconds; a request answered on that thread waits behind
whatever the node is busy with (a gossip flood: hundreds of milliseconds). So the trio thread
builds the status at a steady cadence (`StatusPublisher.run`, and at once on `refresh()`: each
round's end), normalises it into a fresh JSON-safe copy that no one mutates afterwards, and puts
it in a `SnapshotHolder`; the dashboard's thread answers every request from the latest one.

`StatusPublisher.status` is the `StatusSource` for `build_app` on the serving thread: it asks
the trio thread for a snapshot taken after the request came and waits `fresh_wait_s` (50 ms)
for it: an idle node answers with its state of now, a busy one with its latest snapshot. Either
way the status carries `status_age_s` (seconds since its state was read) and `status_built_at`
(unix seconds), so a reader can tell a node whose loop is stuck (an age that keeps growing)
from a live one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs
import trio
import trio.lowlevel

from swarmp2p.dashboard.status import StatusSource, StatusUnavailable, read_status

DEFAULT_INTERVAL_S = 0.5
DEFAULT_FRESH_WAIT_S = 0.05


@attrs.frozen
class Snapshot:
    """One status as built on the node's thread: `status` is normalised (a deep, JSON-safe copy)
    and never mutated after publishing; `error` is the one-line failure when the source failed;
    `built_monotonic` is when its state was read (the build's start)."""

    status: Mapping[str, Any] | None
    error: str
    built_monotonic: float
    built_unix: float


class SnapshotHolder:
    """The latest snapshot, shared between the publishing thread and the serving thread."""

    def __init__(self) -> None:
        self._published = threading.Condition()
        self._latest: Snapshot | None = None

    def publish(self, snapshot: Snapshot) -> None:
        with self._published:
            self._latest = snapshot
            self._published.notify_all()

    def latest(self) -> Snapshot | None:
        with self._published:
            return self._latest

    def wait_newer(self, since_monotonic: float, timeout_s: float) -> bool:
        """Block (not on the node's thread) until a snapshot read at or after `since_monotonic`
        is published, at most `timeout_s`; whether one was."""

        def newer() -> bool:
            return self._latest is not None and self._latest.built_monotonic >= since_monotonic

        with self._published:
            return self._published.wait_for(newer, timeout_s)

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
        fresh_wait_s: float = DEFAULT_FRESH_WAIT_S,
        holder: SnapshotHolder | None = None,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.fresh_wait_s = fresh_wait_s
        self.holder = holder if holder is not None else SnapshotHolder()
        self.failures = 0
        self._wake = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    def refresh(self) -> None:
        """Publish a new snapshot now (call on the trio thread: a round has just ended)."""
        self._wake.set()

    async def status(self) -> dict[str, Any]:
        """The status for one request, on the serving thread: a snapshot read after the request
        came when the node's loop takes it within `fresh_wait_s`, else the latest one."""
        token = self._token
        if token is not None and self.fresh_wait_s > 0:
            asked = time.monotonic()
            try:
                token.run_sync_soon(self.refresh)  # thread-safe; runs at the loop's next tick
            except trio.RunFinishedError:
                pass  # the node stopped: its last snapshot is all there is
            else:
                await trio.to_thread.run_sync(self.holder.wait_newer, asked, self.fresh_wait_s)
        return self.holder.status()

    async def publish_once(self) -> Snapshot:
        started = time.monotonic()
        try:
            status: dict[str, Any] | None = await read_status(self.source)
            error = ""
        except Exception as failure:  # a broken source must not stop the publishing
            self.failures += 1
            status, error = None, " ".join(f"{type(failure).__name__}: {failure}".split())[:300]
        built_unix = time.time() - (time.monotonic() - started)
        snapshot = Snapshot(status=status, error=error, built_monotonic=started, built_unix=built_unix)
        self.holder.publish(snapshot)
        return snapshot

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish until cancelled; `started` once the first snapshot is in the holder, so a
        server started after it never answers "no status yet"."""
        self._token = trio.lowlevel.current_trio_token()
        try:
            await self.publish_once()
            task_status.started()
            while True:
                with trio.move_on_after(self.interval_s):
                    await self._wake.wait()
                self._wake = trio.Event()
                await self.publish_once()
        finally:
            self._token = None  # no one publishes any more: requests get the last snapshot at once
