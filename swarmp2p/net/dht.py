"""The Kademlia DHT: one namespace of our own ("/swarmp2p/..."), strictly validated.

Stock go-libp2p nodes accept only /pk and /ipns records, so the swarm's records live under a
namespace whose validator every swarm implementation registers (py here, js in interop/js).
Strict validation means a key outside a registered namespace is refused on put and on receipt.

Every refusal is counted by reason (`dht_foreign_namespace`, `dht_malformed_key`, `dht_oversized`,
`dht_malformed_record`; `dht_rejected` is their total), and the local store is bounded
(`BoundedValueStore`): records expire after `ttl_s` (a few rounds: a record is about one
round's batch), each owner (the key's last segment, which the node's record check holds to be
the signer) keeps at most `max_records_per_owner` records and `max_bytes_per_owner` bytes, and
the whole store at most `max_records` records and `max_bytes` bytes. py-libp2p's own store kept
every validly signed record for 24 h, up to 50,000 entries of up to 1 MiB each, and scanned all
of them on every put once full.

What py-libp2p's DHT stream handler refuses before any validator runs (a PUT_VALUE without a
record, or whose key is empty or not UTF-8, whose record key differs from the message key, whose
record is empty or over its 1 MiB limit; a GET_VALUE or provider request whose key is empty or
too long; a message over its size limit or not a protobuf) is counted as
`dht_refused_by_libp2p` (also in `dht_rejected`) by `_count_handler_refusals`, which sees each
message the handler reads. A FIND_NODE for a key that is not a peer id is refused too, and
counted apart (`dht_lookup_refused`): py-libp2p's own `put_value` asks its closest-peer lookups
with the record's key, so py-libp2p peers refuse every such hop of each other's puts. A record
whose libp2p signature is wrong (checked after our validator accepted it) is
`dht_bad_record_signature` (`_counting_verify_record`).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import Any

import attrs
import multihash
import trio
from libp2p.abc import IHost
from libp2p.io.exceptions import MessageTooLarge
from libp2p.kad_dht import DHTMode, KadDHT
from libp2p.kad_dht import kad_dht as _kad_module
from libp2p.kad_dht.common import MAX_RECORD_SIZE
from libp2p.kad_dht.pb.kademlia_pb2 import Message, Record
from libp2p.kad_dht.value_store import ValueStore
from libp2p.peer.id import ID
from libp2p.records.record import make_signed_put_record
from libp2p.records.utils import InvalidRecordType
from libp2p.records.validator import NamespacedValidator, Validator

from swarmp2p.net.counters import DropCounters

_MAX_KEY_BYTES = 512

RecordCheck = Callable[[str, bytes], None]
"""Application-level check of a record: (full key, value) -> None, raising ValueError when invalid."""


@attrs.frozen
class RecordRounds:
    """How records expire with their round: `round_of(full key)` names a record's round (None:
    a key without one, kept by TTL only) and `current_round()` ours (None or negative: not
    known). A record more than `keep_rounds` rounds old is refused and dropped from the store
    (`dht_stale_round`); one for a round beyond `ahead_rounds` after ours is refused
    (`dht_future_round`: it would otherwise sit in the store until its round came)."""

    round_of: Callable[[str], int | None]
    current_round: Callable[[], int | None]
    keep_rounds: int = 2
    ahead_rounds: int = 1

    def verdict(self, key: str) -> str | None:
        record_round = self.round_of(key)
        now = self.current_round()
        if record_round is None or now is None or now < 0:
            return None
        if record_round < now - self.keep_rounds:
            return "dht_stale_round"
        if record_round > now + self.ahead_rounds:
            return "dht_future_round"
        return None


class SwarmRecordValidator(Validator):
    """Size cap plus an optional application check (e.g. signed-envelope verification)."""

    def __init__(self, namespace: str, max_value_bytes: int, counters: DropCounters) -> None:
        self.namespace = namespace
        self.max_value_bytes = max_value_bytes
        self.counters = counters
        self.check: RecordCheck | None = None
        self.rounds: RecordRounds | None = None

    def _refuse(self, kind: str, message: str) -> InvalidRecordType:
        self.counters.add(kind)
        self.counters.add("dht_rejected")
        return InvalidRecordType(message)

    def validate(self, key: str, value: bytes) -> None:
        if not key.startswith(f"/{self.namespace}/"):
            raise self._refuse("dht_foreign_namespace", f"key {key[:80]!r} is outside /{self.namespace}/")
        if not well_formed_key(key):
            raise self._refuse("dht_malformed_key", f"malformed key {key[:80]!r}")
        if not isinstance(value, bytes | bytearray) or len(value) > self.max_value_bytes:
            size = len(value) if isinstance(value, bytes | bytearray) else "?"
            raise self._refuse("dht_oversized", f"record of {size} bytes exceeds {self.max_value_bytes}")
        if self.rounds is not None:
            verdict = self.rounds.verdict(key)
            if verdict is not None:
                raise self._refuse(verdict, f"record {key[:80]!r} is out of the round window")
        if self.check is not None:
            try:
                self.check(key, value)
            except Exception as error:  # any failure of the app check is a rejection, not a crash
                raise self._refuse("dht_malformed_record", f"record rejected: {error}") from error

    def select(self, key: str, values: list[bytes]) -> int:
        # put_value offers [new, old]: the newest write wins. Records are immutable per key by
        # convention (one key per swarm/round/stage/peer), so this only matters on re-publish.
        return 0


def well_formed_key(key: str) -> bool:
    """A key of ours: "/<namespace>/<segment>/.../<owner>", printable ASCII, no empty segment,
    at most 512 bytes."""
    if len(key) > _MAX_KEY_BYTES or not key.isascii() or not key.isprintable():
        return False
    segments = key.split("/")
    return len(segments) >= 3 and segments[0] == "" and all(segments[1:])


class _CountingNamespacedValidator(NamespacedValidator):
    """py-libp2p's strict namespaced validator, counting what it refuses before ours runs."""

    def __init__(self, namespace: str, record_validator: SwarmRecordValidator) -> None:
        super().__init__({namespace: record_validator}, strict_validation=True)
        self._record_validator = record_validator

    def validate(self, key: str, value: bytes) -> None:
        if self.validator_by_key(key) is None:
            raise self._record_validator._refuse(
                "dht_foreign_namespace", f"no validator for key {key[:80]!r} (strict validation)"
            )
        super().validate(key, value)


class BoundedValueStore(ValueStore):
    """py-libp2p's value store with expiry, per-owner and total caps (see the module doc).

    Eviction is oldest first (insertion order), counted: `dht_evicted_owner_cap` (the owner's
    own older records make room), `dht_evicted_full` (the store is full), `dht_expired`. This
    node's own records (owner = its peer id) are never evicted for other owners' records."""

    def __init__(
        self,
        host: IHost,
        local_owner: str,
        counters: DropCounters,
        *,
        ttl_s: float,
        max_records: int,
        max_bytes: int,
        max_records_per_owner: int,
        max_bytes_per_owner: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(host, host.get_id())
        self.local_owner = local_owner
        self.counters = counters
        self.ttl_s = ttl_s
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_records_per_owner = max_records_per_owner
        self.max_bytes_per_owner = max_bytes_per_owner
        self._clock = clock
        self.rounds: RecordRounds | None = None  # set with the validator's (see build_dht)
        self.total_bytes = 0
        self._sizes: dict[bytes, int] = {}
        self._owners: dict[bytes, str] = {}
        self._by_owner: dict[str, dict[bytes, None]] = {}  # insertion-ordered keys per owner
        self._owner_bytes: dict[str, int] = {}
        self._next_sweep = 0.0

    # ---- py-libp2p's entry points -----------------------------------------------------------

    def put(self, key: bytes, value: bytes, validity: float = 0.0) -> None:
        """Our own put: signed with the host key like py-libp2p's, but not queued for its 22 h
        republish (the adapter replicates each put itself, and a record outlives no round)."""
        record = make_signed_put_record(key, value, self.host.get_private_key())
        self._admit(key, record, validity or self._clock() + self.ttl_s)

    def put_record(self, key: bytes, record: Record) -> None:
        self._admit(key, record, self._clock() + self.ttl_s)

    def get(self, key: bytes) -> Record | None:
        entry = self.store.get(key)
        if entry is None:
            return None
        record, validity = entry
        if validity is not None and validity < self._clock():
            self._forget(key)
            self.counters.add("dht_expired")
            return None
        return record

    def has(self, key: bytes) -> bool:
        return self.get(key) is not None

    def remove(self, key: bytes) -> bool:
        if key in self.store:
            self._forget(key)
            return True
        return False

    def cleanup_expired(self) -> int:
        now = self._clock()
        rounds = self.rounds
        expired = [
            key
            for key, (_, validity) in self.store.items()
            if (validity is not None and now > validity)
            or (rounds is not None and rounds.verdict(key.decode("utf-8", "replace")) == "dht_stale_round")
        ]
        for key in expired:
            self._forget(key)
        if expired:
            self.counters.add("dht_expired", len(expired))
        return len(expired)

    def sweep(self) -> int:
        """Drop what expired (by TTL or round) now; the adapter calls it on its upkeep tick."""
        self._next_sweep = self._clock() + min(30.0, self.ttl_s / 4)
        return self.cleanup_expired()

    def _save(self) -> None:  # no persistence: the store lives and dies with the process
        return

    # ---- bookkeeping ----------------------------------------------------------------------

    def owner_count(self) -> int:
        return len(self._by_owner)

    def _admit(self, key: bytes, record: Record, validity: float) -> None:
        now = self._clock()
        if now >= self._next_sweep:
            self._next_sweep = now + min(30.0, self.ttl_s / 4)
            self.cleanup_expired()
        if key in self.store:
            self._forget(key)
        size = len(key) + len(record.value)
        owner = key.rsplit(b"/", 1)[-1].decode("utf-8", "replace")
        owned = self._by_owner.get(owner, {})
        while owned and (
            len(owned) >= self.max_records_per_owner
            or self._owner_bytes.get(owner, 0) + size > self.max_bytes_per_owner
        ):
            self._forget(next(iter(owned)))
            self.counters.add("dht_evicted_owner_cap")
        if size > self.max_bytes_per_owner:
            self.counters.add("dht_evicted_owner_cap")
            return  # bigger than one owner may hold: not stored at all
        while len(self.store) >= self.max_records or self.total_bytes + size > self.max_bytes:
            victim = next((k for k in self.store if self._owners.get(k) != self.local_owner), None)
            if victim is None:
                break  # only our own records left: those are bounded by the per-owner cap
            self._forget(victim)
            self.counters.add("dht_evicted_full")
        self.store[key] = (record, validity)
        self._sizes[key] = size
        self._owners[key] = owner
        self._by_owner.setdefault(owner, {})[key] = None
        self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) + size
        self.total_bytes += size

    def _forget(self, key: bytes) -> None:
        self.store.pop(key, None)
        self.local_keys.discard(key)
        self._last_republish.pop(key, None)
        size = self._sizes.pop(key, 0)
        self.total_bytes -= size
        owner = self._owners.pop(key, None)
        if owner is None:
            return
        owned = self._by_owner.get(owner)
        if owned is not None:
            owned.pop(key, None)
            if not owned:
                del self._by_owner[owner]
        left = self._owner_bytes.get(owner, 0) - size
        if left > 0:
            self._owner_bytes[owner] = left
        else:
            self._owner_bytes.pop(owner, None)


# ---- what py-libp2p's DHT stream handler refuses before our validator -----------------------

_HOSTS: dict[ID, tuple[DropCounters, float]] = {}
"""Each running host's counters and inbound stream idle limit, by its peer id (several hosts
share a process in tests)."""


def _count_handler_refusals(host: IHost, counters: DropCounters, idle_s: float) -> None:
    """Count what KadDHT's stream handler refuses without a word (it logs at WARNING, which the
    node silences), and end inbound DHT streams that stay idle. The handler reads each inbound
    message with the module's `read_varint_prefixed_bytes_limited`, wrapped here once per
    process: it looks at what was read, by the same rules and before the handler applies them,
    and gives each read `idle_s` seconds. py-libp2p serves at most 12 inbound DHT streams at a
    time and resets every stream past those; a stream whose client never closed it held its
    slot for ever: after a 60 s sybil attack (the nodes' own lookups timing out on their side)
    all 12 were held and the node served no DHT request from anyone, honest sweeps included
    (bench/bench_attack.py). An idle stream now fails its read (`dht_stream_idle_reset`), the
    handler resets it, and the slot is free again."""
    _HOSTS[host.get_id()] = (counters, idle_s)
    original = _kad_module.read_varint_prefixed_bytes_limited
    if getattr(original, "counts_refusals", False):
        return

    async def counting_read(stream: Any, max_length: int) -> bytes:
        counters, idle_s = _host_of(stream)
        _serving_counters.set(counters)  # for the record-signature check later in this task
        try:
            with trio.fail_after(idle_s):
                data: bytes = await original(stream, max_length)
        except trio.TooSlowError:
            if counters is not None:
                counters.add("dht_stream_idle_reset")
            raise  # an Exception: the handler resets the stream and frees its slot
        except MessageTooLarge:
            _refused(counters)
            raise
        refusal = _handler_refusal(data)
        if refusal == _LOOKUP_REFUSED:
            if counters is not None:
                counters.add(_LOOKUP_REFUSED)
        elif refusal is not None:
            _refused(counters)
        return data

    counting_read.counts_refusals = True  # type: ignore[attr-defined]
    _kad_module.read_varint_prefixed_bytes_limited = counting_read  # type: ignore[assignment]
    _kad_module.verify_record = _counting_verify_record(_kad_module.verify_record)


_serving_counters: contextvars.ContextVar[DropCounters | None] = contextvars.ContextVar(
    "_serving_counters", default=None
)
"""The counters of the host whose DHT handler runs in this trio task (set at each read)."""


def _counting_verify_record(original: Callable[[bytes, bytes, bytes, bytes], bool]) -> Any:
    """KadDHT's handler checks a record's libp2p signature after our validator (on PUT_VALUE) and
    again before serving it (GET_VALUE), and refuses or drops a bad one with a debug line only."""

    def counting_verify(signature: bytes, author: bytes, key: bytes, value: bytes) -> bool:
        valid = original(signature, author, key, value)
        counters = _serving_counters.get()
        if not valid and counters is not None:
            counters.add("dht_bad_record_signature")
            counters.add("dht_rejected")
        return valid

    return counting_verify


def _host_of(stream: Any) -> tuple[DropCounters | None, float]:
    try:
        return _HOSTS.get(stream.muxed_conn.secured_conn.get_local_peer(), (None, 10.0))
    except Exception:
        return None, 10.0


_KEYED_REQUEST_LIMITS = {
    Message.MessageType.GET_VALUE: 128,
    Message.MessageType.GET_PROVIDERS: 128,
    Message.MessageType.ADD_PROVIDER: 80,
}
"""The longest key KadDHT 0.8.1's handler serves for each request type (it resets the stream on
an empty key or a longer one)."""


_LOOKUP_REFUSED = "dht_lookup_refused"
_REFUSED = "dht_refused_by_libp2p"


def _handler_refusal(data: bytes) -> str | None:
    """Why KadDHT 0.8.1's handler refuses a message before validating a record (None: it does
    not). `dht_refused_by_libp2p`: a message that is not a protobuf; a PUT_VALUE without a record,
    or whose record is malformed (see the module doc); a GET_VALUE, GET_PROVIDERS or ADD_PROVIDER
    whose key is empty or too long. `dht_lookup_refused`: a FIND_NODE whose key is neither a
    multihash nor 2-50 bytes, which is what py-libp2p's own `put_value` sends for a record key
    (the closest peers to the key): every such lookup hop to a py-libp2p peer is refused, honest
    or not, so it is counted apart from refused records. Each resets the stream with a warning
    at most, which the node's logging silences."""
    message = Message()
    try:
        message.ParseFromString(data)
    except Exception:
        return _REFUSED
    kind = message.type
    if kind == Message.MessageType.FIND_NODE:
        return None if _find_node_key_ok(message.key) else _LOOKUP_REFUSED
    if kind in _KEYED_REQUEST_LIMITS:
        return None if 0 < len(message.key) <= _KEYED_REQUEST_LIMITS[kind] else _REFUSED
    if kind != Message.MessageType.PUT_VALUE:
        return None
    if not message.HasField("record"):
        return _REFUSED
    record = message.record
    if not message.key or record.key != message.key or not record.value:
        return _REFUSED
    if len(record.SerializeToString()) > MAX_RECORD_SIZE:
        return _REFUSED
    try:
        record.key.decode("utf-8")
    except UnicodeDecodeError:
        return _REFUSED
    return None


def _find_node_key_ok(key: bytes) -> bool:
    if not key:
        return False
    if 2 <= len(key) <= 50:
        return True
    try:
        multihash.decode(key)
    except Exception:
        return False
    return True


def _refused(counters: DropCounters | None) -> None:
    if counters is not None:
        counters.add(_REFUSED)
        counters.add("dht_rejected")


def build_dht(
    host: IHost,
    namespace: str,
    max_value_bytes: int,
    counters: DropCounters,
    *,
    record_ttl_s: float = 600.0,
    max_records: int = 4096,
    max_bytes: int = 64 * 1024 * 1024,
    max_records_per_owner: int = 8,
    max_bytes_per_owner: int = 4 * 1024 * 1024,
    stream_idle_s: float = 10.0,
) -> tuple[KadDHT, SwarmRecordValidator]:
    record_validator = SwarmRecordValidator(namespace, max_value_bytes, counters)
    validator = _CountingNamespacedValidator(namespace, record_validator)
    _count_handler_refusals(host, counters, stream_idle_s)
    dht = KadDHT(
        host,
        DHTMode.SERVER,
        validator=validator,
        validator_changed=True,  # do not add /pk and /ipns: only our namespace is served
        strict_validation=True,
    )
    dht.value_store = BoundedValueStore(
        host,
        host.get_id().to_base58(),
        counters,
        ttl_s=record_ttl_s,
        max_records=max_records,
        max_bytes=max_bytes,
        max_records_per_owner=max_records_per_owner,
        max_bytes_per_owner=max_bytes_per_owner,
    )
    return dht, record_validator


def namespaced_key(namespace: str, key: str) -> str:
    """The full DHT key for a port-level key: "round/3/peer" -> "/swarmp2p/round/3/peer"."""
    prefix = f"/{namespace}/"
    if key.startswith(prefix):
        return key
    return prefix + key.lstrip("/")
