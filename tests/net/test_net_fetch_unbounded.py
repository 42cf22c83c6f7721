"""A fetch over a network port that does not bound its own waits (`bounds_waits` not True, as
py-libp2p's request on a starved machine): the fetcher's own limit, twice the fetch timeout,
cancels the request, and the fetch goes on to the DHT. On a loaded 2-core machine the limit fired
in tests/net/test_net_sybil_fetch.py and the fetch raised UnboundLocalError instead (logged as
"failed unexpectedly"), so the batch was not looked up in the DHT at all.

A Fetcher over the real admission Inbox and a network port on trio's virtual clock."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from protocol.admission import FetchJob
from swarmp2p.fetcher import Fetcher
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import PeerSettings
from tests.helpers.inbox import ALICE, ROUND, SEED, SWARM, make_inbox, pid

TIMEOUT_S = 1.0


class HangingNetwork:
    """A request is never answered and never times out on its own; the DHT has `stored`."""

    bounds_waits = False

    def __init__(self, stored: bytes | None) -> None:
        self.stored = stored
        self.dht_lookups = 0

    def connected_peers(self) -> Sequence[str]:
        return []

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def dht_get(self, key: str) -> bytes | None:
        self.dht_lookups += 1
        return self.stored


def test_a_request_past_the_fetchers_own_limit_falls_back_to_the_dht() -> None:
    inbox = make_inbox()
    network = HangingNetwork(stored=b"the batch")
    settings = PeerSettings(swarm_id=SWARM, seed=SEED, tasks=("echo",), fetch_timeout_s=TIMEOUT_S)
    fetcher = Fetcher(settings, inbox.rules.me, network, inbox, VerifyCache(), on_hold=lambda: None)  # type: ignore[arg-type]
    job = FetchJob(round=ROUND, stage=0, sender=pid(ALICE), digest=b"", group_count=-1)

    async def main() -> None:
        started = trio.current_time()
        fetched = await fetcher._fetch(job)
        assert fetched == (b"the batch", False)
        assert network.dht_lookups == 1
        assert trio.current_time() - started == 2 * TIMEOUT_S  # the request's limit, then the DHT
        assert fetcher.counters["dht_fallbacks"] == 1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
