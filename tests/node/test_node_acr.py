"""Three real `swarmp2p node` OS processes playing answer -> critique -> resolve: the first
starts the swarm with `--game answer-critique-resolve` (its signed schedule says 3 stages a
round), the others join and adopt it; every stage of every round completes on every node,
later-stage batches are verified and accepted, and only the stages the game trains are trained."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from tests.node.test_node_swarm import NodeProcess, swarm_report, wait_for, warm_model, write_config

__all__ = ["warm_model"]  # the module-scoped fixture, shared with the five-node test

ROUND_SECONDS = 24.0  # three 8-second stages: three tiny-model processes share two cores
STAGES = 3


def start_acr_swarm(nodes: list[NodeProcess]) -> list[dict[str, Any]]:
    """Start nodes[0] with the game (it founds the swarm: its signed schedule says 3 stages), then
    the others bootstrapping from it; each node's info, in order."""
    nodes[0].args += ["--game", "answer-critique-resolve", "--round-seconds", str(ROUND_SECONDS)]
    nodes[0].start()
    boot = nodes[0].info()
    assert boot["schedule"]["stage_count"] == STAGES
    for node in nodes[1:]:
        node.args += ["--bootstrap", boot["listen_addrs"][0]]
        node.start()
    return [boot] + [node.info() for node in nodes[1:]]


def by_position(node: NodeProcess) -> dict[tuple[int, int], dict[str, Any]]:
    return {(record["round"], record["stage"]): record for record in node.rounds()}


@pytest.mark.slow
def test_three_nodes_play_every_stage_of_answer_critique_resolve(tmp_path: Path, warm_model: Path) -> None:
    config = write_config(tmp_path / "swarm.toml")
    nodes = [NodeProcess(tmp_path / f"node{i}", config, warm_model, []) for i in range(3)]
    try:
        ids = [info["peer_id"] for info in start_acr_swarm(nodes)]
        wait_for(lambda: all(node.rounds() for node in nodes), 3 * ROUND_SECONDS, "a first record everywhere")
        first = max(node.rounds()[0]["round"] for node in nodes) + 1
        checked = [first, first + 1]
        wait_for(
            lambda: all((checked[-1], STAGES - 1) in by_position(node) for node in nodes),
            (len(checked) + 2) * ROUND_SECONDS + 30,
            f"every stage of rounds {checked} on every node",
        )
        for node, peer_id in zip(nodes, ids, strict=True):
            records = by_position(node)
            for round_number in checked:
                for stage in range(STAGES):
                    record = records[(round_number, stage)]
                    assert record["completed"], (peer_id, record)
                    assert not record["rejected"].get("forged_reward"), (peer_id, record)
                    assert set(record["accepted_peers"]) <= set(ids) - {peer_id}
                    trained = record["trained_local"] + record["trained_external"]
                    assert (trained == 0) == (stage == 1), (peer_id, record)  # critiques are not trained
                # each stage's batches of the other peers verified and were taken in
                assert any(records[(round_number, 1)]["accepted_peers"] for round_number in checked)
                assert any(records[(round_number, 2)]["accepted_peers"] for round_number in checked)
        for node in nodes:
            assert node.stop(signal.SIGTERM, timeout_s=15) == 0, node.output()
    except BaseException:
        print(swarm_report(nodes))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)
