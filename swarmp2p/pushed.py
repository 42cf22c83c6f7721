"""Eager push: a small batch travels inside its gossip announcement (a PushedAnnouncement).

Without it every receiver opens a stream to the author and asks for the batch: with N peers
that is N x (N-1) streams a round, each through py-libp2p's Python noise and yamux on both
ends, plus a round trip. A batch no larger than the transport's `push_max_bytes` goes out in
the announcement's own gossip message instead, which every peer receives anyway.

Nothing about admission changes: the receiver hands the inner announcement to the inbox as if
it had come alone, and only when the inbox decides to fetch that batch does it keep the pushed
bytes (`PushedBatches`), which the fetch then takes instead of opening a stream. The batch is
judged exactly as a fetched one (its digest against the signed announcement, its signature,
every reward re-scored). Batches the inbox defers or refuses are dropped at once, so what is
kept is bounded by the fetch queue. Large batches, the DHT fallback and late joiners still use
the fetch protocol, which every peer keeps serving. So does an announcement for a round this
node has not opened yet (the inbox holds it, `Hold`, and releases it when the round opens): its
push is not kept, and that batch is fetched as before. A node that lags its peers (a long
training step) therefore fetches more of its batches; keeping held pushes too is not done.
"""

from __future__ import annotations

from collections import Counter

from protocol import codec
from protocol.errors import ProtocolError
from protocol.messages import PushedAnnouncement

PUSHED_PREFIX = codec.kind_prefix("pushed")


def wrap(sealed_announcement: bytes, envelope: bytes) -> bytes:
    """The gossip payload that carries `envelope` with its announcement."""
    return codec.encode(PushedAnnouncement(announcement=sealed_announcement, envelope=envelope))


def unwrap(data: bytes) -> tuple[bytes, bytes | None]:
    """(sealed announcement, pushed envelope or None) of an announce-topic payload.

    A plain announcement comes back as it is, with None: one `startswith`, nothing decoded.
    Raises ProtocolError for a payload that claims to be a push and is not a valid one."""
    if not data.startswith(PUSHED_PREFIX):
        return data, None
    message = codec.decode(data)
    if not isinstance(message, PushedAnnouncement):  # pragma: no cover - the prefix names the kind
        raise ProtocolError("wrong_kind", f"expected a pushed announcement, got {type(message).__name__}")
    return message.announcement, message.envelope


class PushedBatches:
    """Pushed envelopes the inbox decided to fetch, until a fetch worker takes them.

    Keyed by (author, batch digest): the digest is the one in the author's signed announcement,
    so a pushed envelope can only ever stand in for the batch that announcement names (and the
    inbox still checks it). Bounded: at most `max_entries` (the fetch queue's size), oldest
    dropped first and counted, though every entry is normally taken within the round."""

    def __init__(self, max_entries: int, counters: Counter[str]) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._entries: dict[tuple[str, bytes], bytes] = {}
        self._counters = counters

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, sender: str, digest: bytes, envelope: bytes) -> None:
        key = (sender, digest)
        self._entries.pop(key, None)
        if len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
            self._counters["pushed_evicted"] += 1
        self._entries[key] = envelope

    def take(self, sender: str, digest: bytes) -> bytes | None:
        if not self._entries:
            return None
        return self._entries.pop((sender, digest), None)

    def discard(self, sender: str, digest: bytes) -> None:
        self._entries.pop((sender, digest), None)
