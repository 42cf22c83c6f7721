"""Forged critiques against three real `swarmp2p node` processes playing answer -> critique ->
resolve. Two hostile libp2p hosts join the running swarm; for one round each fetches the honest
stage-0 batches, then announces and serves its own correctly signed stage-1 (critique) batch:

  liar      references the honest answers correctly but claims reward 1.0 for picks that
            re-score to 0.0: every honest node rejects it as `forged_reward` and bans the liar
  misquoter references a group the pinned stage-0 batch does not have: `bad_input`, blamed

Neither is ever accepted, built on (resolved) or trained on, and the honest nodes complete every
stage of that round and the next. Fails if critiques were not re-scored (the liar's batch would
be accepted) or their references not resolved (the misquoter's would be)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.helpers.acr_swarm import ROUND_SECONDS, STAGES, by_position, start_acr_swarm
from tests.helpers.nodes import NodeProcess, swarm_report, write_config
from tests.helpers.waiting import free_port, wait_for


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


@pytest.mark.slow
def test_nodes_reject_forged_critiques_and_complete_every_stage(tmp_path: Path, warm_model: Path) -> None:
    config = write_config(tmp_path / "swarm.toml")
    ports = [free_port() for _ in range(3)]
    nodes = [
        NodeProcess(tmp_path / f"node{i}", config, warm_model, ["--dashboard-port", str(port)])
        for i, port in enumerate(ports)
    ]
    try:
        infos = start_acr_swarm(nodes)
        boot = infos[0]
        honest = [(info["peer_id"], info["listen_addrs"][0]) for info in infos]
        ids = [peer for peer, _ in honest]
        wait_for(lambda: all(node.rounds() for node in nodes), 3 * ROUND_SECONDS, "a first record everywhere")
        schedule = boot["schedule"]
        attacked = (int(time.time() * 1000) - schedule["genesis_ms"]) // schedule["round_ms"] + 1
        hostile = attack(boot, honest, attacked)
        checked = [attacked, attacked + 1]
        wait_for(
            lambda: all((checked[-1], STAGES - 1) in by_position(node) for node in nodes),
            (len(checked) + 2) * ROUND_SECONDS + 30,
            f"every stage of rounds {checked} on every node",
        )
        for node, peer_id, port in zip(nodes, ids, ports, strict=True):
            records = by_position(node)
            rejected = records[(attacked, 1)]["rejected"]
            # Each forged critique rejected with its reason, in the critique stage it came in.
            assert rejected.get("forged_reward", 0) >= 1, (peer_id, records[(attacked, 1)])
            assert rejected.get("bad_input", 0) >= 1, (peer_id, records[(attacked, 1)])
            status = api_status(port)
            assert hostile["liar"] in status["banned"], (peer_id, status["banned"])  # blamed: proof of lying
            assert set(status["banned"]) <= set(hostile.values()), status["banned"]
            for round_number in checked:
                for stage in range(STAGES):
                    record = records[(round_number, stage)]
                    assert record["completed"], (peer_id, record)
                    # Never accepted, never built on, never trained on.
                    assert set(record["accepted_peers"]) <= set(ids) - {peer_id}, (peer_id, record)
                    assert set(record["external_peers_trained_on"]) <= set(ids), (peer_id, record)
                    trained = record["trained_local"] + record["trained_external"]
                    assert (trained == 0) == (stage == 1), (peer_id, record)
                    if (round_number, stage) != (attacked, 1):
                        assert not record["rejected"].get("forged_reward"), (peer_id, record)
                        assert not record["rejected"].get("bad_input"), (peer_id, record)
            # The honest critiques of the attacked round still verified and fed the resolve stage.
            assert any(records[(r, 1)]["accepted_peers"] for r in checked), peer_id
            assert any(records[(r, 2)]["accepted_peers"] for r in checked), peer_id
        for node in nodes:
            assert node.stop(signal.SIGTERM, timeout_s=15) == 0, node.output()
    except BaseException:
        print(swarm_report(nodes))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)
