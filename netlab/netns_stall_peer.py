"""One libp2p host (swarmp2p.net's adapter) inside a harness namespace, for `python
netlab/netns_harness.py stall --libp2p`: how long after a heal a request over the connection that
lived through the cut is answered.

    python netlab/netns_stall_peer.py serve LISTEN_ADDR
        serves requests (answers b"pong"), prints its full multiaddr, runs until killed
    python netlab/netns_stall_peer.py probe SERVER_MULTIADDR
        connects, prints "ready", gossips a message every 0.5 s (so that data is in flight
        whenever the path is cut), reads the heal time (wall clock) from stdin, then sends
        requests with a 3 s timeout until one is answered; prints JSON: seconds from the heal
        to the answer, failed requests, the adapter's drop counters
"""

from __future__ import annotations

import json
import sys
import time

import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from swarmp2p.net import NetworkSettings, open_libp2p_network

TOPIC = "stall-probe"
REQUEST_TIMEOUT_S = 3.0


async def serve(listen: str) -> None:
    async with open_libp2p_network(create_new_key_pair(), NetworkSettings(listen=(listen,))) as net:

        async def pong(_requester: str, _data: bytes) -> bytes:
            return b"pong"

        net.set_request_handler(pong)
        await net.subscribe(TOPIC)
        print(net.listen_addrs()[0], flush=True)
        await trio.sleep_forever()


async def gossip_forever(net: object) -> None:
    while True:
        await net.publish(TOPIC, b"x" * 200)  # type: ignore[attr-defined]
        await trio.sleep(0.5)


async def probe(server: str) -> None:
    async with open_libp2p_network(create_new_key_pair(), NetworkSettings()) as net:
        peer_id = await net.connect(server)
        await net.subscribe(TOPIC)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gossip_forever, net)
            print("ready", flush=True)
            heal_at = float(await trio.to_thread.run_sync(sys.stdin.readline))
            failed = 0
            while True:
                try:
                    await net.request(peer_id, b"ping", REQUEST_TIMEOUT_S)
                    break
                except Exception:
                    failed += 1
                    await trio.sleep(0.2)
            elapsed = time.time() - heal_at
            drops = {k: v for k, v in net.status().get("drops", {}).items() if v}
            print(
                json.dumps({"answered_after_s": round(elapsed, 1), "failed": failed, "drops": drops}),
                flush=True,
            )
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        trio.run(serve, sys.argv[2])
    else:
        trio.run(probe, sys.argv[2])
