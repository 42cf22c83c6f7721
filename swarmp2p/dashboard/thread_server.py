"""The dashboard served from a thread of its own (its own trio run), so that a request never
waits for the node's trio loop: with a `SnapshotHolder` as its source (swarmp2p/dashboard/
snapshot.py) every answer comes from the latest published snapshot, however busy the node is.

    port = await nursery.start(serve_dashboard_in_thread, publisher.status)

The server lives as long as the calling task: cancelling it stops the server's trio run and
joins its thread (hypercorn's graceful timeout: about a second).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from pathlib import Path
from typing import Any

import trio

from swarmp2p.dashboard.app import serve_dashboard
from swarmp2p.dashboard.status import StatusSource

log = logging.getLogger("swarmp2p.dashboard")

_JOIN_TIMEOUT_S = 5.0


class _ServerThread:
    """One trio run serving the dashboard; `port` (or the start-up error) arrives on `ready`."""

    def __init__(self, serve: Any) -> None:
        self._serve = serve
        self.ready: queue.SimpleQueue[int | BaseException] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._stopping = False
        self.thread = threading.Thread(target=self._main, name="swarmp2p-dashboard", daemon=True)

    def _main(self) -> None:
        try:
            trio.run(self._serve_until_stopped)
        except BaseException as error:  # reported to the starter; after start-up: logged
            self.ready.put(error)
            log.warning("dashboard server thread stopped: %s", error)

    async def _serve_until_stopped(self) -> None:
        with trio.CancelScope() as scope:
            self._token, self._scope = trio.lowlevel.current_trio_token(), scope
            if self._stopping:  # stopped before the token was there for stop() to use
                scope.cancel()
            async with trio.open_nursery() as nursery:
                self.ready.put(await nursery.start(self._serve))

    def stop(self) -> None:
        self._stopping = True  # set before reading the token: one of the two sides sees the other
        token, scope = self._token, self._scope
        if token is None or scope is None:
            return
        try:
            token.run_sync_soon(scope.cancel)  # thread-safe, and callable from another trio run
        except trio.RunFinishedError:
            pass  # it already ended


async def serve_dashboard_in_thread(
    source: StatusSource,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    title: str = "swarmp2p",
    history_file: Path | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`serve_dashboard` on a thread of its own until cancelled; reports the bound port through
    `task_status`. `source` is called on that thread: it must be thread-safe (a
    `StatusPublisher.status`, not the node's live status)."""
    server = _ServerThread(
        functools.partial(
            serve_dashboard, source, host=host, port=port, title=title, history_file=history_file
        )
    )
    server.thread.start()
    try:
        bound = await trio.to_thread.run_sync(server.ready.get, abandon_on_cancel=True)
        if isinstance(bound, BaseException):
            raise bound
        task_status.started(bound)
        # Wait for the thread (abandoned on cancel): a server that died is logged by its thread.
        await trio.to_thread.run_sync(server.thread.join, abandon_on_cancel=True)
    finally:
        server.stop()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.thread.join, _JOIN_TIMEOUT_S)
