"""One gossip message opened once for all of its receivers in one process (the simulator).

A simulated gossip message reaches hundreds of virtual peers as the SAME bytes object. Each
receiver's `Inbox.heard` would open it through its `Opener`; with a `SharedOpen` the first
receiver that gets that far opens it and the others reuse the outcome. What the skipped calls
would have done to the opener (a memo hit each, in `VerifyCache`) is settled afterwards with
`FastOpener.reopened`, so the opener's state and counters end up exactly as with one call per
receiver (tests/protocol/test_admission_many.py). The simulator settles at the end of each
virtual instant, so its VerifyCache's identity memo is sized to hold an instant's messages
until then (simulator/runner.py): a message it had dropped would be opened again, a miss, not a hit.

Why the outcome may be shared: `heard` opens only data no longer than the receiver's
`max_announce_bytes`, and below that bound the outcome of opening does not depend on the bound.
"""

from __future__ import annotations

from typing import Any

from protocol.envelope import Opened
from protocol.errors import ProtocolError


class SharedOpen:
    """`open(opener, max_size)` for one message's `data`, memoized per opener."""

    __slots__ = ("by_opener", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        # id(opener) -> [opener, outcome, max_size, calls answered from the memo, facts]: read
        # directly (not through `peek`) by heard_run, once per delivery; `facts` is that
        # method's own note of what it found in the outcome (None until it looks).
        self.by_opener: dict[int, list[Any]] = {}

    def open(self, opener: Any, max_size: int) -> Opened:
        """What `opener.open(self.data, max_size=max_size)` returns or raises."""
        entry = self.by_opener.get(id(opener))
        if entry is None:
            try:
                outcome: Opened | ProtocolError = opener.open(self.data, max_size=max_size)
            except ProtocolError as error:
                outcome = error
            self.by_opener[id(opener)] = [opener, outcome, max_size, 0, None]
        else:
            entry[3] += 1
            outcome = entry[1]
        if isinstance(outcome, ProtocolError):
            raise ProtocolError(outcome.reason, outcome.message)
        return outcome

    def peek(self, opener: Any) -> list[Any] | None:
        """The memo entry `[opener, outcome, max_size, repeats, facts]` once `opener` opened the data,
        else None. Counts nothing: a caller that uses the outcome in place of `open` adds 1 to
        `entry[3]` (heard_run does, once it is sure to decide)."""
        return self.by_opener.get(id(opener))

    def settle(self) -> None:
        """Tell each opener about the calls it did not get (call once, after all receivers)."""
        for opener, _, max_size, repeats, _ in self.by_opener.values():
            if repeats:
                opener.reopened(self.data, repeats, max_size=max_size)
        self.by_opener.clear()
