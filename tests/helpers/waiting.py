"""Waiting for a condition in tests, and a free local port: one copy for the whole suite.

`wait_for` polls from plain code (a test driving OS processes), `wait_until` from trio code (a test
driving hosts in its own event loop). Both fail with what they waited for, so that a timeout on a
busy CI machine says which condition did not come.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.2) -> T:
    """Poll `condition` until it returns something true and return that; AssertionError naming
    `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


async def wait_until(condition: Callable[[], Any], timeout_s: float = 15.0, poll_s: float = 0.05) -> None:
    """In trio: wait until `condition()` is true; trio.TooSlowError after `timeout_s`."""
    import trio

    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(poll_s)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a dashboard, an RPC endpoint)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
