"""Our side of sharing: publishing this round's batch (a signed announcement on gossip and the
envelope in the DHT, both at once) and serving recent batches to peers that fetch them."""

from __future__ import annotations

import logging
from collections import Counter

import trio

from protocol import codec
from protocol.admission import Inbox
from protocol.envelope import Opened, seal
from protocol.errors import ProtocolError
from protocol.messages import FetchRequest, FetchResponse, RolloutAnnouncement
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import PeerSettings, announce_topic, batch_dht_key
from swarmp2p.ports import NetworkError, NetworkPort
from swarmp2p.pushed import wrap
from swarmp2p.round_record import RoundWork

log = logging.getLogger("swarmp2p.peer")


class Publisher:
    def __init__(
        self,
        settings: PeerSettings,
        peer_id: str,
        signing_seed: bytes,
        network: NetworkPort,
        inbox: Inbox,
        cache: VerifyCache,
        counters: Counter[str],
    ) -> None:
        self.settings = settings
        self.peer_id = peer_id
        self._seed = signing_seed
        self.network = network
        self.inbox = inbox
        self.cache = cache
        self.counters = counters
        self.topic = announce_topic(settings.swarm_id)
        # (round, stage) -> encoded FetchResponse carrying our signed batch, for recent rounds.
        self._published: dict[tuple[int, int], bytes] = {}
        self._not_found = codec.encode(FetchResponse(found=False, envelope=b""))
        # Batches up to this size ride in their announcement's gossip message (swarmp2p/pushed.py):
        # the transport says how much its gossip carries well (0: announcements only).
        self.push_max_bytes = network.push_max_bytes

    def keep(self, round_number: int, stage: int, envelope: bytes) -> None:
        """Serve `envelope` as our batch for (round, stage) from now on (recent rounds only)."""
        self._published[(round_number, stage)] = codec.encode(FetchResponse(found=True, envelope=envelope))
        for key in sorted(self._published)[: -self.settings.keep_published_rounds]:
            del self._published[key]

    async def publish(self, work: RoundWork) -> None:
        envelope = work.envelope
        if not envelope:
            return
        announcement = RolloutAnnouncement(
            swarm_id=self.settings.swarm_id,
            round=work.round,
            stage=work.stage,
            peer_id=self.peer_id,
            batch_digest=work.batch_digest,
            group_count=len(work.local),
            size_bytes=len(envelope),
        )
        work.rollouts_out = len(work.local)
        sealed = seal(announcement, self._seed)
        # What opening our own envelopes gives is known: the simulator's peers share the cache.
        if work.batch is not None:
            self.cache.sealed(envelope, Opened(self.peer_id, work.batch, work.batch_digest))
        self.cache.sealed(sealed, Opened(self.peer_id, announcement, self.cache.digest(sealed)))
        if len(envelope) <= self.push_max_bytes:
            sealed = wrap(sealed, envelope)
            self.counters["pushed"] += 1
        key = batch_dht_key(self.settings.swarm_id, work.round, work.stage, self.peer_id)
        # Both at once: the announcement is what peers act on before their collect deadline, so
        # it must not queue behind a DHT put (a lookup plus stores to the closest peers). The
        # put starts first only in name: start_soon runs it once the announce awaits.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._put_batch, key, envelope)
            await self._announce(sealed)

    async def _announce(self, sealed: bytes) -> None:
        # Never raises: a failure inside the nursery would cancel the sibling DHT put.
        try:
            await self.network.publish(self.topic, sealed)
            self.counters["published"] += 1
        except NetworkError as error:
            log.warning("%s: publish failed: %s", self.peer_id, error)
            self.counters["publish_failed"] += 1
        except Exception:
            log.exception("%s: publish failed", self.peer_id)
            self.counters["publish_failed"] += 1

    async def _put_batch(self, key: str, envelope: bytes) -> None:
        try:
            await self.network.dht_put(key, envelope)
        except NetworkError:
            self.counters["dht_put_failed"] += 1  # best effort: peers fetch directly first
        except Exception:
            log.exception("%s: DHT put failed", self.peer_id)
            self.counters["dht_put_failed"] += 1

    async def serve(self, requester: str, data: bytes) -> bytes:
        """Answer a peer's FetchRequest for one of our recent batches. Never raises."""
        try:
            request = self.cache.decode(data)
        except ProtocolError as error:
            self.inbox.reject(f"request_{error.reason}", blame=requester)
            return self._not_found
        except Exception:
            log.exception("%s: decoding a fetch request failed", self.peer_id)
            self.inbox.reject("internal_error", blame=None)
            return self._not_found
        if not isinstance(request, FetchRequest) or request.swarm_id != self.settings.swarm_id:
            self.inbox.reject("bad_request", blame=requester)
            return self._not_found
        if request.peer_id != self.peer_id:
            return self._not_found
        self.counters["served"] += 1
        return self._published.get((request.round, request.stage), self._not_found)
