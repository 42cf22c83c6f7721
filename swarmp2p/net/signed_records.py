"""Each gossip peer's signed peer record checked once a minute, not on every RPC it sends.

py-libp2p 0.8.1 attaches the sender's signed peer record (an Envelope: its listen addresses,
signed with its key) to EVERY pubsub RPC, and the receiver consumes it on every RPC: parse the
envelope, verify its ed25519 signature, rebuild the peer id from the public key, then clear
and re-add the peer's addresses in the peerstore (`maybe_consume_signed_record`, called from
`Pubsub.continuously_read_stream` and again from `GossipSub.handle_rpc` for control RPCs). A
peer sends the same record bytes each time until its addresses change, so all but the first
of those checks redo work whose outcome is already known. At 20 processes exchanging 10 KB
batches it was about a tenth of a process's CPU (py-spy, docs/benchmarks.md).

`install()` puts a memo in front of it: a (peer, record bytes) pair that the same host consumed
successfully less than `REFRESH_S` ago is answered True without the work. Anything else (a
first sight, new record bytes, a different peer sending them, a record that failed, a memo
entry past `REFRESH_S`) goes through py-libp2p's own function, so a forged or mismatched
record is refused exactly as before, every time. The refresh keeps the peerstore's copy
current: the record's addresses are stored for 2 h by py-libp2p and re-stored at least once
a minute while the peer talks to us. py-libp2p ignores an RPC whose record it refuses with
only a log line; the memo counts each one (`gossip_bad_peer_record`).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
from libp2p.pubsub import utils as pubsub_utils

from swarmp2p.net.counters import DropCounters

REFRESH_S = 60.0
"""How long a successfully consumed (peer, record) pair is trusted without a new check."""

MAX_ENTRIES = 4096
"""Memo entries kept per host (oldest dropped first): one per connected peer and record in use."""

Consume = Callable[[Any, Any, Any], bool]


class SignedRecordMemo:
    """`maybe_consume_signed_record(msg, host, peer_id)` with repeats answered from a memo, and
    refusals counted (py-libp2p drops the whole RPC with only a log line)."""

    def __init__(
        self,
        consume: Consume,
        *,
        refresh_s: float = REFRESH_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consume = consume
        self.refresh_s = refresh_s
        self.max_entries = max_entries
        self._clock = clock
        # Per host (its peerstore: several hosts in one process, in tests and the bench, each
        # keep their own addresses), (peer id bytes, record bytes) -> when last consumed.
        self._consumed: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[bytes, bytes], float]] = (
            weakref.WeakKeyDictionary()
        )
        self._counters: weakref.WeakKeyDictionary[Any, DropCounters] = weakref.WeakKeyDictionary()
        self.checked = 0  # calls that went through py-libp2p's consume
        self.remembered = 0  # calls answered from the memo

    def count_refusals(self, host: Any, counters: DropCounters) -> None:
        """Count `gossip_bad_peer_record` in `counters` for RPCs `host` ignores for their record."""
        self._counters[host.get_peerstore()] = counters

    def __call__(self, msg: Any, host: Any, peer_id: Any) -> bool:
        if not msg.HasField("senderRecord"):
            return True  # as py-libp2p: nothing to consume
        peerstore = host.get_peerstore()
        consumed = self._consumed.get(peerstore)
        if consumed is None:
            consumed = self._consumed[peerstore] = OrderedDict()
        key = (peer_id.to_bytes(), msg.senderRecord)
        now = self._clock()
        consumed_at = consumed.get(key)
        if consumed_at is not None and now - consumed_at < self.refresh_s:
            self.remembered += 1
            return True
        self.checked += 1
        ok = self._consume(msg, host, peer_id)
        if ok:
            consumed[key] = now
            consumed.move_to_end(key)
            while len(consumed) > self.max_entries:
                consumed.popitem(last=False)
        else:
            consumed.pop(key, None)
            counters = self._counters.get(peerstore)
            if counters is not None:
                counters.add("gossip_bad_peer_record")
        return ok


_installed: SignedRecordMemo | None = None


def install() -> SignedRecordMemo:
    """Route py-libp2p's pubsub and gossipsub calls through one process-wide memo (idempotent).
    Both modules import the function by name, so it is replaced where they look it up."""
    global _installed
    if _installed is None:
        _installed = SignedRecordMemo(pubsub_utils.maybe_consume_signed_record)
        pubsub_module.maybe_consume_signed_record = _installed  # type: ignore[attr-defined]
        gossipsub_module.maybe_consume_signed_record = _installed  # type: ignore[attr-defined]
    return _installed
