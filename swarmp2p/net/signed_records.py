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

The sending side has the same waste: py-libp2p builds the record to attach with
`env_to_send_in_RPC(host)` before every RPC it writes, which lists the host's addresses
(multiaddr parsing, netaddr, the observed-address manager) and compares them with the cached
record's: ~5% of a process's py-spy samples at 20 processes exchanging 10 KB batches, once the
per-read yamux updates were gone. `OwnRecordMemo` keeps each host's answer for `OWN_REFRESH_S`:
a changed address reaches peers at most that much later (py-libp2p itself re-issues the record
only when asked, on the next RPC).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import libp2p.pubsub.floodsub as floodsub_module
import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
from libp2p.peer import peerstore as peerstore_module
from libp2p.pubsub import utils as pubsub_utils

from swarmp2p.net.counters import DropCounters

REFRESH_S = 60.0
"""How long a successfully consumed (peer, record) pair is trusted without a new check."""

OWN_REFRESH_S = 5.0
"""How long a host's own record to attach is reused before its addresses are listed again."""

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


class OwnRecordMemo:
    """`env_to_send_in_RPC(host)` answered from a per-host memo for `refresh_s` seconds."""

    def __init__(
        self,
        make: Callable[[Any], tuple[bytes, bool]],
        *,
        refresh_s: float = OWN_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make = make
        self.refresh_s = refresh_s
        self._clock = clock
        self._made: weakref.WeakKeyDictionary[Any, tuple[bytes, float]] = weakref.WeakKeyDictionary()
        self.made = 0  # calls that went through py-libp2p's function

    def __call__(self, host: Any) -> tuple[bytes, bool]:
        now = self._clock()
        made = self._made.get(host)
        if made is not None and now - made[1] < self.refresh_s:
            return made[0], False  # (envelope, newly issued): as py-libp2p answers a cache hit
        self.made += 1
        envelope, issued = self._make(host)
        self._made[host] = (envelope, now)
        return envelope, issued


_installed: SignedRecordMemo | None = None
_own_installed: OwnRecordMemo | None = None


def install() -> SignedRecordMemo:
    """Route py-libp2p's pubsub and gossipsub calls through one process-wide memo (idempotent).
    Both modules import the function by name, so it is replaced where they look it up."""
    global _installed
    if _installed is None:
        _installed = SignedRecordMemo(pubsub_utils.maybe_consume_signed_record)
        pubsub_module.maybe_consume_signed_record = _installed  # type: ignore[attr-defined]
        gossipsub_module.maybe_consume_signed_record = _installed  # type: ignore[attr-defined]
    install_own()
    return _installed


def install_own() -> OwnRecordMemo:
    """Route py-libp2p's `env_to_send_in_RPC` (imported by name into pubsub, gossipsub and
    floodsub) through one process-wide `OwnRecordMemo` (idempotent)."""
    global _own_installed
    if _own_installed is None:
        _own_installed = OwnRecordMemo(peerstore_module.env_to_send_in_RPC)
        for module in (pubsub_module, gossipsub_module, floodsub_module):
            module.env_to_send_in_RPC = _own_installed  # type: ignore[attr-defined]
    return _own_installed
