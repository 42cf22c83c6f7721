"""A cache of decoding, envelope-opening and batch-verification outcomes, keyed by sha256.

Why: every batch is checked by every other peer. Opening an envelope costs an Ed25519 verify
(~50-100 µs), strict decoding walks the whole message, and verifying a batch re-scores every
completion. All three outcomes are a pure function of the bytes (given the swarm's settings:
seed, tasks, questions per round, limits), so a node that sees the same bytes twice (gossip
duplicates, DHT fallback after a direct fetch, replays) can skip the work. In the simulator ONE
cache is shared by all virtual peers of a swarm (same settings), which turns N verifications of
a batch into one: that is what makes 100 peers x 100 rounds feasible on 2 cores.

Two levels:
- by content: sha256 of the bytes -> outcome (bounded LRU). Serves a real node, whose duplicates
  arrive as fresh byte strings.
- by identity: the very same `bytes` object seen again -> outcome, without hashing it. In the
  simulator every receiver of a gossip message or a fetch response gets the same object, so this
  skips a sha256 per delivery. The memo holds a reference to each object it remembers, so an id()
  can never be reused by another object while its entry exists (bounded FIFO).

Decoded messages and opened envelopes are frozen attrs objects: sharing them between peers is
safe. Failures are cached too (a replayed garbage message costs one lookup). Inputs larger than
`max_item_bytes` are processed but not remembered, so a real node's memory stays bounded by
entries x item size even when peers send multi-megabyte batches.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgpack

from protocol import codec
from protocol.envelope import Opened, open_envelope
from protocol.errors import ProtocolError
from protocol.messages import WireMessage

_BUFFER_TYPES = (bytes, bytearray, memoryview)


class _IdentityMemo:
    """id(obj) -> (obj, value) for the last `max_entries` objects, oldest dropped first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._table: dict[int, tuple[object, Any]] = {}

    def get(self, obj: object) -> tuple[object, Any] | None:
        entry = self._table.get(id(obj))
        return entry if entry is not None and entry[0] is obj else None

    def put(self, obj: object, value: Any) -> None:
        table = self._table
        table[id(obj)] = (obj, value)
        if len(table) > self.max_entries:
            del table[next(iter(table))]


class VerifyCache:
    def __init__(
        self, max_entries: int = 50_000, *, identity_entries: int = 1024, max_item_bytes: int = 256 * 1024
    ) -> None:
        if max_entries < 1 or identity_entries < 1 or max_item_bytes < 0:
            raise ValueError("max_entries and identity_entries must be >= 1, max_item_bytes >= 0")
        self.max_entries = max_entries
        self.max_item_bytes = max_item_bytes
        self._opened: OrderedDict[bytes, Opened | ProtocolError] = OrderedDict()
        self._verdicts: OrderedDict[bytes, Any] = OrderedDict()
        self._decoded: OrderedDict[bytes, WireMessage | ProtocolError] = OrderedDict()
        self._opened_by_identity = _IdentityMemo(identity_entries)
        # The envelopes `sealed` was told of, by identity -> their signer, once `track_seals` is
        # called (a simulator worker's cache): a node does not keep its own past batches.
        self._sealed_by_identity: _IdentityMemo | None = None
        self.on_verdict: Callable[[bytes, Any], None] | None = None
        """Called with each verdict computed here (simulator/shards.py hands it to its other
        worker processes, as one process's peers share it through this cache)."""
        self._decoded_by_identity = _IdentityMemo(identity_entries)
        self._digest_by_identity = _IdentityMemo(identity_entries)
        self._identity_entries = identity_entries
        self._encoded: dict[WireMessage, bytes] = {}
        self.hits = 0
        self.misses = 0
        self.decode_hits = 0
        self.decode_misses = 0

    def digest(self, data: bytes) -> bytes:
        """sha256(data), remembered for the object so a shared buffer is hashed once."""
        entry = self._digest_by_identity.get(data)
        if entry is not None:
            return entry[1]
        value = hashlib.sha256(data).digest()
        if self._memoizable(data):
            self._digest_by_identity.put(data, value)
        return value

    def _memoizable(self, data: object) -> bool:
        # Only immutable buffers may be remembered by identity (a bytearray could change).
        return type(data) is bytes and len(data) <= self.max_item_bytes

    def open(self, data: bytes, *, max_size: int | None = None) -> Opened:
        """`protocol.envelope.open_envelope(data, max_size=...)`, memoized. Raises ProtocolError."""
        if max_size is not None and isinstance(data, _BUFFER_TYPES) and len(data) > max_size:
            # The cache is keyed by content only, so a context's tighter cap is applied here.
            raise ProtocolError("oversized", f"envelope: {len(data)} bytes > {max_size}")
        # The identity memo, inlined: this is the per-delivery path (every receiver of a
        # simulated gossip message holds the same bytes object).
        entry = self._opened_by_identity._table.get(id(data))
        if entry is not None and entry[0] is data:
            self.hits += 1
            outcome = entry[1]
        else:
            key = self.digest(data) if self._memoizable(data) else None
            outcome = self._opened.get(key) if key is not None else None
            if outcome is None:
                self.misses += 1
                try:
                    outcome = open_envelope(data, max_size=max_size)
                except ProtocolError as error:
                    outcome = error
                if key is not None:
                    self._remember(self._opened, key, outcome)
            else:
                self.hits += 1
                self._opened.move_to_end(key)
            if key is not None:
                self._opened_by_identity.put(data, outcome)
        if isinstance(outcome, ProtocolError):
            raise ProtocolError(outcome.reason, outcome.message)
        return outcome

    def sealed(self, data: bytes, opened: Opened) -> None:
        """`data` is an envelope this process sealed itself, and `opened` what opening it gives:
        remembered as if opened, without checking the signature we just made. In the simulator
        every peer shares this cache, so each honest announcement and batch skips its one
        Ed25519 verification and decode (signatures are cheaper where the simulator may
        trust its own signing); an adversary seals on its own and is opened as usual. A node's
        own envelopes never come back to it to be opened, so there this costs one entry."""
        if self._memoizable(data):
            self._known_opened(data, opened)
            if self._sealed_by_identity is not None:
                self._sealed_by_identity.put(data, opened.signer)

    def _known_opened(self, data: bytes, opened: Opened) -> None:
        self._remember(self._opened, opened.digest, opened)
        self._digest_by_identity.put(data, opened.digest)
        self._opened_by_identity.put(data, opened)

    def track_seals(self) -> None:
        """From now on remember the envelopes `sealed` is told of, for `sealer_of`: twice the
        identity memo's entries, so that a round's announcements and batches are all still
        there when they are fetched (simulator/shards.py)."""
        if self._sealed_by_identity is None:
            self._sealed_by_identity = _IdentityMemo(2 * self._identity_entries)

    def sealer_of(self, data: bytes) -> str | None:
        """The signer of `data` if it is an envelope this process sealed since `track_seals`."""
        if self._sealed_by_identity is None:
            return None
        entry = self._sealed_by_identity.get(data)
        return None if entry is None else entry[1]

    def sealed_elsewhere(self, data: bytes, signer: str) -> None:
        """`data` is an envelope that `signer` sealed in another process of this simulation
        (simulator/shards.py: its `sealer_of` said so): remembered as if sealed here, the
        signature unchecked, as one process trusts its own peers' seals. The inner message is
        decoded as usual. Never for bytes from a network."""
        if not self._memoizable(data) or self._opened_by_identity.get(data) is not None:
            return
        digest = self.digest(data)
        opened = self._opened.get(digest)
        if not isinstance(opened, Opened):
            try:
                opened = Opened(signer, self.decode(msgpack.unpackb(data, raw=False)["m"]), digest)
            except (ProtocolError, ValueError, KeyError, TypeError):
                return  # not what a peer of ours seals: opened (and judged) as usual
        # Not `sealed`: only this process's own seals are passed on as such (`sealer_of`), and
        # a remote one would push them out of that memo.
        self._known_opened(data, opened)

    def reopened(self, data: bytes, times: int, *, max_size: int | None = None) -> None:
        """FastOpener.reopened (simulator/fastpath/heard_run.py): `times` more `open(data)` calls
        right after one. The identity memo answers them (a hit each) when it holds `data`;
        otherwise they are made."""
        entry = self._opened_by_identity._table.get(id(data))
        if entry is not None and entry[0] is data:
            self.hits += times
            return
        for _ in range(times):
            try:
                self.open(data, max_size=max_size)
            except ProtocolError:
                pass

    def peek_opened(self, data: bytes) -> Opened | None:
        """FastOpener.peek_opened (simulator/fastpath/heard_run.py): the opened envelope the
        identity memo holds for this very `data` object (what `open(data)` would answer with a
        hit), else None; counts nothing."""
        entry = self._opened_by_identity._table.get(id(data))
        if entry is not None and entry[0] is data and not isinstance(entry[1], ProtocolError):
            return entry[1]  # type: ignore[no-any-return]
        return None

    def decode(self, data: bytes) -> WireMessage:
        """`protocol.codec.decode(data)`, memoized. Raises ProtocolError."""
        entry = self._decoded_by_identity.get(data)
        if entry is not None:
            self.decode_hits += 1
            outcome = entry[1]
        else:
            key = self.digest(data) if self._memoizable(data) else None
            outcome = self._decoded.get(key) if key is not None else None
            if outcome is None:
                self.decode_misses += 1
                try:
                    outcome = codec.decode(data)
                except ProtocolError as error:
                    outcome = error
                if key is not None:
                    self._remember(self._decoded, key, outcome)
            else:
                self.decode_hits += 1
                self._decoded.move_to_end(key)
            if key is not None:
                self._decoded_by_identity.put(data, outcome)
        if isinstance(outcome, ProtocolError):
            raise ProtocolError(outcome.reason, outcome.message)
        return outcome

    def encode(self, message: WireMessage) -> bytes:
        """`protocol.codec.encode(message)`, memoized by the (immutable, hashable) message: every
        peer asking one sender for one round's batch sends the same FetchRequest bytes, and the
        server's `decode` then hits by identity. Raises ProtocolError."""
        encoded = self._encoded.get(message)
        if encoded is None:
            encoded = codec.encode(message)
            self._encoded[message] = encoded
            if len(self._encoded) > self._identity_entries:
                del self._encoded[next(iter(self._encoded))]
        return encoded

    def verdict(self, digest: bytes, compute: Callable[[], Any]) -> Any:
        """The verification verdict for the batch envelope with sha256 `digest`; computed once."""
        if digest in self._verdicts:
            self.hits += 1
            self._verdicts.move_to_end(digest)
            return self._verdicts[digest]
        self.misses += 1
        verdict = compute()
        self._remember(self._verdicts, digest, verdict)
        if self.on_verdict is not None:
            self.on_verdict(digest, verdict)
        return verdict

    def known_verdict(self, digest: bytes, verdict: Any) -> None:
        """A verdict another process of this simulation computed for `digest` (`on_verdict`)."""
        if digest not in self._verdicts:
            self._remember(self._verdicts, digest, verdict)

    def _remember(self, table: OrderedDict[bytes, Any], key: bytes, value: Any) -> None:
        table[key] = value
        if len(table) > self.max_entries:
            table.popitem(last=False)
