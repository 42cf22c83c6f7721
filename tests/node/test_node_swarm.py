"""Real `swarmp2p node` OS processes on 127.0.0.1: a 4-node swarm with a SIGKILL and a rejoin, and
a node under attack from garbage, oversized, replayed and impersonated messages.

Four nodes are the fewest that show everything the swarm test checks: a node against the
swarm's rules that adopts them, a victim, and peer exchange (a joiner that bootstrapped from
node 0 alone meets a third peer). Two checked rounds show training on two others; the victim
restarts as soon as it is killed, so its rejoin overlaps the survivors' rounds after the kill.

The tiny model is built and warmed up ONCE (a few supervised steps, so that GRPO groups have
reward variance and are not all dropped) and saved as a model folder every node loads.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.nodes import (
    ROUND_SECONDS,
    TASKS,
    NodeProcess,
    by_round,
    swarm_report,
    wait_for,
    write_config,
)
from tests.helpers.rounds import fates_accounted_for, trained_records
from tests.helpers.waiting import free_port

# Node ODD is configured against the swarm's rules (task order, format reward, questions per
# round): it must adopt the first peer's rules from its hello, or it would reject every honest
# batch as forged (and have its own rejected).
ODD_TASKS = tuple(reversed(TASKS))
ODD_NOTICE = (
    f"swarm rules: tasks {','.join(TASKS)}; questions_per_round 2; format_reward 0.5 "
    f"(local config's tasks {','.join(ODD_TASKS)}; questions_per_round 3; format_reward 0.2 ignored)"
)


NODES = 4
ODD = 2  # the node configured against the swarm's rules
VICTIM = 3  # the node killed and restarted


@pytest.mark.slow
def test_four_node_swarm_survives_sigkill_and_rejoin(tmp_path: Path, warm_model: Path) -> None:
    config = write_config(tmp_path / "swarm.toml")
    odd = write_config(tmp_path / "odd.toml", tasks=ODD_TASKS, format_reward=0.2, questions_per_round=3)
    port = free_port()
    nodes = [
        NodeProcess(tmp_path / f"node{i}", odd if i == ODD else config, warm_model, []) for i in range(NODES)
    ]
    nodes[1].args += ["--dashboard-port", str(port)]
    try:
        run_swarm_scenario(nodes, status_port=port)
    except BaseException:
        print(swarm_report(nodes))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)


def run_swarm_scenario(nodes: list[NodeProcess], status_port: int) -> None:
    nodes[0].start()
    boot = nodes[0].info()
    bootstrap = boot["listen_addrs"][0]
    for node in nodes[1:]:
        node.args += ["--bootstrap", bootstrap]
        node.start()
    infos = [boot] + [node.info() for node in nodes[1:]]
    ids = [info["peer_id"] for info in infos]
    assert len(set(ids)) == NODES
    assert all(info["schedule"] == boot["schedule"] for info in infos), "joiners learned another schedule"
    round_ms = boot["schedule"]["round_ms"]
    genesis_ms = boot["schedule"]["genesis_ms"]

    # The first round every node started from its beginning, then two rounds. On a busy host a
    # round may be reported late or abandoned (counted, with its fate): every round is accounted
    # for, and within a few rounds every node trains on at least two others and takes node ODD's
    # rollouts (it adopted the swarm's rules).
    wait_for(lambda: all(node.rounds() for node in nodes), 120, "every node to finish a round")
    first = max(node.rounds()[0]["round"] for node in nodes) + 1
    checked = [first, first + 1]
    window = range(first, first + 3 * len(checked))

    def exchanged(node: NodeProcess, peer_id: str) -> bool:
        records = by_round(node)
        trained = trained_records(records, window)
        took_odd = peer_id == ids[ODD] or any(ids[ODD] in r["accepted_peers"] for r in records.values())
        return took_odd and any(len(r["external_peers_trained_on"]) >= 2 for r in trained)

    wait_for(
        lambda: (
            all(checked[-1] in by_round(node) for node in nodes)
            and all(exchanged(node, peer_id) for node, peer_id in zip(nodes, ids, strict=True))
        ),
        (len(window) + 2) * ROUND_SECONDS + 30,
        f"every node to train on two others within rounds {list(window)}",
    )
    assert ODD_NOTICE in nodes[ODD].output(), nodes[ODD].output()
    assert all("swarm rules:" not in node.output() for i, node in enumerate(nodes) if i != ODD)
    for node, peer_id in zip(nodes, ids, strict=True):
        records = by_round(node)
        played = range(first, max(records) + 1)
        fates_accounted_for(records, played, peer_id)
        # Everyone scores by the same rules: no honest batch is taken for a forgery.
        assert not any(records[r]["rejected"].get("forged_reward") for r in played), node.output()
        for record in trained_records(records, played):
            trained_on = set(record["external_peers_trained_on"])
            assert peer_id not in trained_on
            assert trained_on <= set(ids)
            assert record["rollouts_out"] > 0
        # Peer exchange meshes the swarm: nobody hangs off the bootstrap peer alone (a joiner
        # knows only node 0 from its command line; a second peer came by peer exchange).
        assert max(records[r]["peers"] for r in played) >= 2, (peer_id, records)

    # SIGKILL the victim in the middle of a round and restart it at once; the others account for
    # that round and the next (on an idle host they complete them) and go on.
    victim = nodes[VICTIM]
    survivors = [node for i, node in enumerate(nodes) if i != VICTIM]
    kill_round = max(max(by_round(node)) for node in nodes) + 1
    kill_at_ms = genesis_ms + kill_round * round_ms + int(0.4 * round_ms)
    time.sleep(max(0.0, kill_at_ms / 1000 - time.time()))
    victim.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    victim.process.wait(timeout=10)  # type: ignore[union-attr]
    rounds_before = victim.rounds()

    # Restart with the same identity: same peer id, joining at the CURRENT round (no replay of
    # the rounds it missed).
    restart_round = (int(time.time() * 1000) - genesis_ms) // round_ms
    victim.start()
    restarted = victim.info()
    assert restarted["peer_id"] == ids[VICTIM]
    wait_for(
        lambda: len(victim.rounds()) > len(rounds_before),
        6 * ROUND_SECONDS + 30,
        "the restarted node's round",
    )
    rejoined = victim.rounds()[len(rounds_before)]
    now_round = (int(time.time() * 1000) - genesis_ms) // round_ms
    assert restart_round <= rejoined["round"] <= now_round, (restart_round, rejoined, now_round)
    # ... and the swarm takes its rollouts again, within a few rounds.
    back = rejoined["round"] + 1
    wait_for(
        lambda: any(
            ids[VICTIM] in record["accepted_peers"]
            for node in survivors
            for number, record in by_round(node).items()
            if number >= back
        ),
        5 * ROUND_SECONDS + 20,
        f"the survivors to take the restarted node's rollouts from round {back} on",
    )
    wait_for(
        lambda: all(kill_round + 1 in by_round(node) for node in survivors),
        4 * ROUND_SECONDS + 20,
        f"survivors to finish round {kill_round + 1}",
    )
    for node in survivors:
        fates_accounted_for(by_round(node), [kill_round, kill_round + 1], node.data_dir.name)

    # Small batches ride in their announcements (swarmp2p/pushed.py): node 1 (its dashboard on
    # `status_port`) pushed its own and took others' from their pushes, not over fetch streams.
    counters = _status(status_port)["counters"]
    assert counters.get("pushed", 0) >= 3 and counters.get("pushed_used", 0) >= 3, counters

    # Clean shutdown on SIGTERM within a few seconds.
    for node in nodes:
        started = time.monotonic()
        assert node.stop(signal.SIGTERM, timeout_s=15) == 0, node.output()
        assert time.monotonic() - started < 15
        assert "stopped" in node.output()


def _status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as response:
        return json.loads(response.read())


# What the attack below must leave counted on the node: rejections, then transport drops.
EXPECTED_REJECTIONS = {
    "oversized": 1,
    "sender_mismatch": 1,
    "stale_round": 2,
    "malformed": 1,  # the garbage gossip
    "request_malformed": 1,  # the garbage fetch request
    "banned": 1,  # three blamed faults ban the sender
}
EXPECTED_DROPS = {"request_garbage": 1, "request_oversized": 1}
ATTACK_ROUND_SECONDS = 5.0


def everything_counted(port: int) -> bool:
    try:
        status = _status(port)
    except OSError:
        return False
    rejections, drops = status.get("rejections", {}), status.get("network", {}).get("drops", {})
    return all(rejections.get(k, 0) >= n for k, n in EXPECTED_REJECTIONS.items()) and all(
        drops.get(k, 0) >= n for k, n in EXPECTED_DROPS.items()
    )


@pytest.mark.slow
def test_node_counts_garbage_oversized_replayed_and_impersonated(tmp_path: Path, warm_model: Path) -> None:
    import trio
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    from protocol.envelope import seal
    from protocol.messages import RolloutAnnouncement
    from swarmp2p.hello import open_hello
    from swarmp2p.net import FETCH_PROTOCOL, NetworkSettings, open_libp2p_network
    from swarmp2p.peer import announce_topic

    port = free_port()
    config = write_config(tmp_path / "one.toml")
    # A swarm of one needs no time for exchange: short rounds (a round it cannot finish in time
    # is recorded with its fate all the same, and all this test reads is that rounds go on).
    args = ["--dashboard-port", str(port), "--round-seconds", str(ATTACK_ROUND_SECONDS)]
    node = NodeProcess(tmp_path / "victim", config, warm_model, args)
    node.start()
    info = node.info()
    target = info["peer_id"]
    swarm = info["schedule"]["swarm_id"]
    topic = announce_topic(swarm)
    seed = os.urandom(32)
    other_seed = os.urandom(32)
    attacker_key = create_new_key_pair(seed)
    net_peer_id: list[str] = []

    async def attack() -> None:
        async with open_libp2p_network(attacker_key, NetworkSettings()) as net:
            net_peer_id.append(net.local_peer_id)
            await net.connect(info["listen_addrs"][0])
            hello = open_hello(await net.request_hello(target), target)
            current = (int(time.time() * 1000) - hello.schedule.genesis_ms) // hello.schedule.round_ms
            # Until we hold a gossip stream to the node and know its subscription to the topic.
            node_id = ID.from_base58(target)
            with trio.fail_after(30):
                while node_id not in net.pubsub.peers or node_id not in net.pubsub.peer_topics.get(topic, ()):
                    await trio.sleep(0.05)

            def announcement(author_seed: bytes, author: str, round_number: int) -> bytes:
                message = RolloutAnnouncement(
                    swarm_id=swarm,
                    round=round_number,
                    stage=0,
                    peer_id=author,
                    batch_digest=bytes(32),
                    group_count=4,
                    size_bytes=100,
                )
                return seal(message, author_seed)

            other_id = ID.from_pubkey(create_new_key_pair(other_seed).public_key).to_base58()
            # Replayed first (replays are counted but not blamed; three blamed faults ban us).
            stale = announcement(seed, net.local_peer_id, 0)
            await net.publish(topic, stale)
            await net.publish(topic, stale)
            # Garbage: not an envelope at all.
            await net.publish(topic, b"\x00\xffnot msgpack at all")
            # Oversized: a gossip message far over the announcement cap.
            await net.publish(topic, b"\x81" + os.urandom(64 * 1024))
            # Impersonated: a validly signed announcement by another peer, sent as our own.
            await net.publish(topic, announcement(other_seed, other_id, current))
            # Now banned: whatever else we send is dropped as "banned".
            await net.publish(topic, b"more garbage")
            # The fetch protocol: garbage and an oversized frame claim.
            for payload in (b"\x00\x00\x00\x05abc", (2**31).to_bytes(4, "big")):
                stream = await net.host.new_stream(ID.from_base58(target), [FETCH_PROTOCOL])
                await stream.write(payload)
                await stream.close()
            with trio.move_on_after(3):
                assert await net.request(target, b"\x93garbage", 5) is not None
            # Stay connected until the node has counted all of it (the checks below say what
            # is missing if that never happens).
            with trio.move_on_after(30):
                while not await trio.to_thread.run_sync(everything_counted, port):
                    await trio.sleep(0.2)

    # Replays are for round 0: past once the node has recorded round 1 (it is in round 2 or on).
    wait_for(lambda: any(r["round"] >= 1 for r in node.rounds()), 60 + 4 * ATTACK_ROUND_SECONDS, "round 1")
    trio.run(attack)
    try:
        status = _status(port)
        rejections = status["rejections"]
        for reason, least in EXPECTED_REJECTIONS.items():
            assert rejections.get(reason, 0) >= least, (reason, rejections)
        assert status["banned"] == [net_peer_id[0]]
        drops = status["network"]["drops"]
        for kind, least in EXPECTED_DROPS.items():
            assert drops.get(kind, 0) >= least, (kind, drops)
        assert not node.exited(), node.output()
        # ... and it keeps doing rounds.
        done = len(node.rounds())
        wait_for(
            lambda: len(node.rounds()) > done, 3 * ATTACK_ROUND_SECONDS + 20, "another round after the attack"
        )
        assert node.stop(signal.SIGINT) == 0, node.output()
    finally:
        node.stop(signal.SIGKILL, timeout_s=5)


@pytest.mark.slow
def test_ctrl_c_during_start_up_and_twice_while_running_stops_cleanly(
    tmp_path: Path, warm_model: Path
) -> None:
    """Ctrl-C is the node's to handle from start-up to the last save: never a traceback."""
    config = write_config(tmp_path / "node.toml")
    node = NodeProcess(tmp_path / "n", config, warm_model, [])
    try:
        # 1. While it is still starting (loading the model, before any round).
        node.start()
        wait_for(lambda: "loading the model" in node.output() or node.exited(), 60, "start-up to begin")
        assert node.stop(signal.SIGINT, timeout_s=30) == 0, node.output()
        first = node.output()
        assert "SIGINT: stopping" in first and "stopped" in first, first
        assert "Traceback" not in first, first

        # 2. Running, then two Ctrl-C in a row (an impatient user): still a clean stop.
        node.start()
        node.info()
        assert node.process is not None
        node.process.send_signal(signal.SIGINT)
        second_log = node.data_dir / "stdout-2.log"
        wait_for(
            lambda: "SIGINT: stopping" in second_log.read_text(errors="replace") or node.exited(),
            30,
            "the first Ctrl-C to be taken",
        )
        assert node.stop(signal.SIGINT, timeout_s=30) == 0, node.output()
        second = second_log.read_text(errors="replace")
        assert "stopped" in second and "Traceback" not in second, second
    finally:
        node.stop(signal.SIGKILL, timeout_s=5)
