"""Give an inbound connection's slot back when the connection closes, not when the host stops.

py-libp2p 0.8.1's swarm caps inbound connections with a capacity limiter of
`max_connections - min_connections` slots. Each inbound connection takes a slot in
`_handle_inbound_connection` and gives it back when `_do_handle_inbound_connection` returns, but
after a successful upgrade that function waits for the whole swarm to finish ("keep the handler
alive"): the slot is held after the connection has closed, for the life of the host. A node
then refuses every inbound connection once that many peers have ever connected to it: 160 with
the default `target_peers` of 32 (tests/net/test_net_peer_tables.py, where the 161st of 1,000
peers joining one after the other could not connect). Under churn, for days, every node would
end up reachable only by its own dials.

`install()` wraps `_do_handle_inbound_connection` so that it returns once the connection it
upgraded has closed (or at once, when the upgrade failed, as before). The connection's own tasks
run in the swarm's service manager, not in this handler, so ending the handler does not close
anything; the wait for the close keeps the slot held while the connection lives, so the cap
still bounds the live inbound connections.
"""

from __future__ import annotations

import contextvars
from typing import Any

import trio
from libp2p.abc import IMuxedConn
from libp2p.network.swarm import Swarm

_POLL_S = 1.0  # for a muxer without a close event (yamux and mplex both have one)


class _Upgrade:
    """What one inbound handler learns from its upgrade: the connection, once it exists."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.done = trio.Event()


_current: contextvars.ContextVar[_Upgrade | None] = contextvars.ContextVar("_current", default=None)


async def _wait_closed(conn: Any) -> None:
    event = getattr(conn, "event_closed", None)
    if isinstance(event, trio.Event):
        await event.wait()
        return
    while not getattr(conn, "is_closed", True):
        await trio.sleep(_POLL_S)


def install() -> None:
    """Patch py-libp2p's Swarm once per process (idempotent)."""
    original_handle = Swarm._do_handle_inbound_connection
    if getattr(original_handle, "releases_on_close", False):
        return
    original_upgrade = Swarm.upgrade_inbound_raw_conn

    async def upgrade_inbound_raw_conn(self: Swarm, raw_conn: Any, maddr: Any) -> Any:
        conn = await original_upgrade(self, raw_conn, maddr)
        upgrade = _current.get()
        if upgrade is not None:
            upgrade.conn = conn
            upgrade.done.set()
        return conn

    async def do_handle_inbound_connection(
        self: Swarm, read_write_closer: Any, maddr: Any, failure_event: Any
    ) -> None:
        upgrade = _Upgrade()
        _current.set(upgrade)  # this task's context: the handler below runs in a copy of it
        if isinstance(read_write_closer, IMuxedConn):  # QUIC and the like: no upgrade to wait for
            upgrade.conn = read_write_closer
            upgrade.done.set()
        async with trio.open_nursery() as nursery:

            async def handle() -> None:
                await original_handle(self, read_write_closer, maddr, failure_event)
                nursery.cancel_scope.cancel()  # returned on its own: the upgrade failed

            nursery.start_soon(handle)
            await upgrade.done.wait()
            await _wait_closed(upgrade.conn)
            nursery.cancel_scope.cancel()  # ends the handler's wait for the swarm to stop

    do_handle_inbound_connection.releases_on_close = True  # type: ignore[attr-defined]
    Swarm._do_handle_inbound_connection = do_handle_inbound_connection  # type: ignore[method-assign]
    Swarm.upgrade_inbound_raw_conn = upgrade_inbound_raw_conn  # type: ignore[method-assign]
