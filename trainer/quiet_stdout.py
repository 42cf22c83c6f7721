"""Swallow what ONE thread prints, without touching what other threads print.

`contextlib.redirect_stdout` swaps `sys.stdout` for the whole process: while a worker thread scores
a reasoning-gym answer (bf prints while it runs), the node's own per-round log line printed from
the main thread would vanish too. Here `sys.stdout` is swapped, while any thread is silenced, for a
proxy that drops writes from silenced threads and passes every other thread's writes through to
the stream that was there before.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

_state = threading.local()  # .depth: how deeply the current thread is silenced
_install_lock = threading.Lock()
_users = 0  # threads inside silenced_stdout() right now, process-wide
_proxy: _ThreadFilteringStdout | None = None


class _ThreadFilteringStdout(io.TextIOBase):
    """Drops writes from silenced threads; forwards everything else to `real`."""

    def __init__(self, real: TextIO) -> None:
        super().__init__()
        self.real = real

    def write(self, text: str) -> int:
        if getattr(_state, "depth", 0) > 0:
            return len(text)
        return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, ... of the real stream
        return getattr(self.real, name)


@contextlib.contextmanager
def silenced_stdout() -> Iterator[None]:
    """Within this block, prints from the calling thread go nowhere; other threads are unaffected."""
    global _users, _proxy
    with _install_lock:
        if _users == 0 or _proxy is None or sys.stdout is not _proxy:
            _proxy = _ThreadFilteringStdout(sys.stdout)
            sys.stdout = _proxy
        _users += 1
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
        with _install_lock:
            _users -= 1
            # Put the original stream back once nobody is silenced, unless someone else (a test
            # harness capturing output, say) has replaced sys.stdout since: theirs wins.
            if _users == 0 and _proxy is not None and sys.stdout is _proxy:
                sys.stdout = _proxy.real
                _proxy = None
