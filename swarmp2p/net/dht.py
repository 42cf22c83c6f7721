"""The Kademlia DHT: one namespace of our own ("/swarmp2p/..."), strictly validated.

Stock go-libp2p nodes accept only /pk and /ipns records, so the swarm's records live under a
namespace whose validator every swarm implementation registers (py here, js in interop/js).
Strict validation means a key outside a registered namespace is refused on put and on receipt.
"""

from __future__ import annotations

from collections.abc import Callable

from libp2p.abc import IHost
from libp2p.kad_dht import DHTMode, KadDHT
from libp2p.records.utils import InvalidRecordType
from libp2p.records.validator import NamespacedValidator, Validator

from swarmp2p.net.counters import DropCounters

RecordCheck = Callable[[str, bytes], None]
"""Application-level check of a record: (full key, value) -> None, raising ValueError when invalid."""


class SwarmRecordValidator(Validator):
    """Size cap plus an optional application check (e.g. signed-envelope verification)."""

    def __init__(self, namespace: str, max_value_bytes: int, counters: DropCounters) -> None:
        self.namespace = namespace
        self.max_value_bytes = max_value_bytes
        self.counters = counters
        self.check: RecordCheck | None = None

    def validate(self, key: str, value: bytes) -> None:
        if not key.startswith(f"/{self.namespace}/"):
            self.counters.add("dht_rejected")
            raise InvalidRecordType(f"key {key!r} is outside namespace /{self.namespace}/")
        if len(value) > self.max_value_bytes:
            self.counters.add("dht_rejected")
            raise InvalidRecordType(f"record of {len(value)} bytes exceeds {self.max_value_bytes}")
        if self.check is not None:
            try:
                self.check(key, value)
            except Exception as error:  # any failure of the app check is a rejection, not a crash
                self.counters.add("dht_rejected")
                raise InvalidRecordType(f"record rejected: {error}") from error

    def select(self, key: str, values: list[bytes]) -> int:
        # put_value offers [new, old]: the newest write wins. Records are immutable per key by
        # convention (one key per swarm/round/stage/peer), so this only matters on re-publish.
        return 0


def build_dht(
    host: IHost, namespace: str, max_value_bytes: int, counters: DropCounters
) -> tuple[KadDHT, SwarmRecordValidator]:
    record_validator = SwarmRecordValidator(namespace, max_value_bytes, counters)
    validator = NamespacedValidator({namespace: record_validator}, strict_validation=True)
    dht = KadDHT(
        host,
        DHTMode.SERVER,
        validator=validator,
        validator_changed=True,  # do not add /pk and /ipns: only our namespace is served
        strict_validation=True,
    )
    return dht, record_validator


def namespaced_key(namespace: str, key: str) -> str:
    """The full DHT key for a port-level key: "round/3/peer" -> "/swarmp2p/round/3/peer"."""
    prefix = f"/{namespace}/"
    if key.startswith(prefix):
        return key
    return prefix + key.lstrip("/")
