"""Two hostile libp2p hosts that forge critiques against a real answer -> critique -> resolve
swarm (tests/node/test_node_acr.py). They join the running swarm; for one round each fetches the
honest stage-0 batches, then announces and serves its own correctly signed stage-1 (critique)
batch:

  liar      references the honest answers correctly but claims reward 1.0 for picks that
            re-score to 0.0 (`forged_reward`, a ban: signed proof of lying)
  misquoter references a group the pinned stage-0 batch does not have (`bad_input`, blamed)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.request
from typing import Any

import attrs


def api_status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as response:
        return json.loads(response.read())


def attack(boot: dict[str, Any], honest: list[tuple[str, str]], target_round: int) -> dict[str, str]:
    """Run the two hostile hosts for `target_round`; returns {role: its peer id}."""
    import trio
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    from protocol import codec
    from protocol.acr import CRITIQUE, InputRef, digest_prefix
    from protocol.envelope import open_envelope, seal
    from protocol.messages import (
        Completion,
        FetchRequest,
        FetchResponse,
        QuestionGroup,
        RolloutAnnouncement,
        RolloutBatch,
    )
    from swarmp2p.net import NetworkSettings, open_libp2p_network
    from swarmp2p.peer_settings import announce_topic

    schedule = boot["schedule"]
    swarm = schedule["swarm_id"]
    stage_ms = schedule["round_ms"] // schedule["stage_count"]
    stage_starts = schedule["genesis_ms"] + (target_round * schedule["stage_count"] + CRITIQUE) * stage_ms
    topic = announce_topic(swarm)
    ids: dict[str, str] = {}

    def critique(role: str, me: str, answers: list[tuple[bytes, RolloutBatch]]) -> RolloutBatch:
        groups = []
        for digest, batch in answers[:2]:
            size = len(batch.groups[0].completions)
            ref = InputRef(batch.peer_id, digest_prefix(digest), 0)
            if role == "misquoter":
                ref = attrs.evolve(ref, group=len(batch.groups) + 5)  # no such group in that batch
            # Picks out of range score 0.0: the liar claims 1.0, the misquoter tells the truth.
            reward = 1.0 if role == "liar" else 0.0
            completions = tuple(Completion(f"<answer>{size + 1 + k}</answer>", reward) for k in range(size))
            groups.append(QuestionGroup(ref.question(), completions))
        return RolloutBatch(swarm, target_round, CRITIQUE, me, tuple(groups))

    async def hostile(role: str) -> None:
        seed = os.urandom(32)
        async with open_libp2p_network(create_new_key_pair(seed), NetworkSettings()) as net:
            me = net.local_peer_id
            ids[role] = me
            served: dict[tuple[int, int], bytes] = {}
            not_found = codec.encode(FetchResponse(found=False, envelope=b""))

            async def serve(requester: str, data: bytes) -> bytes:
                request = codec.decode(data)
                if isinstance(request, FetchRequest) and request.peer_id == me:
                    return served.get((request.round, request.stage), not_found)
                return not_found

            net.set_request_handler(serve)
            for _, addr in honest:
                await net.connect(addr)
            with trio.fail_after(60):  # a gossip stream to every honest node, subscribed to the topic
                while not all(
                    ID.from_base58(peer) in net.pubsub.peer_topics.get(topic, ()) for peer, _ in honest
                ):
                    await trio.sleep(0.1)
            # The honest answers of the target round, as the nodes serve them.
            answers: dict[str, tuple[bytes, RolloutBatch]] = {}
            with trio.fail_after(max(stage_starts / 1000 - time.time(), 0) + 2 * stage_ms / 1000):
                while len(answers) < 2:
                    for peer, _ in honest:
                        if peer in answers:
                            continue
                        request = codec.encode(FetchRequest(swarm, target_round, 0, peer))
                        try:
                            with trio.fail_after(4):
                                response = codec.decode(await net.request(peer, request, 3))
                        except Exception:  # not up yet, or busy: ask again
                            continue
                        if isinstance(response, FetchResponse) and response.found:
                            opened = open_envelope(response.envelope)
                            answers[peer] = (hashlib.sha256(response.envelope).digest(), opened.message)
                    await trio.sleep(0.3)
            batch = critique(role, me, sorted(answers.values(), key=lambda pair: pair[1].peer_id))
            envelope = seal(batch, seed)
            served[(target_round, CRITIQUE)] = codec.encode(FetchResponse(found=True, envelope=envelope))
            announcement = RolloutAnnouncement(
                swarm_id=swarm,
                round=target_round,
                stage=CRITIQUE,
                peer_id=me,
                batch_digest=hashlib.sha256(envelope).digest(),
                group_count=len(batch.groups),
                size_bytes=len(envelope),
            )
            await trio.sleep(max(stage_starts / 1000 + 0.5 - time.time(), 0))
            await net.publish(topic, seal(announcement, seed))
            # Serve the batch (and the inputs' fetches) until the critique stage is over.
            await trio.sleep(max(stage_starts / 1000 + stage_ms / 1000 + 2 - time.time(), 0))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hostile, "liar")
            nursery.start_soon(hostile, "misquoter")

    trio.run(main)
    return ids
