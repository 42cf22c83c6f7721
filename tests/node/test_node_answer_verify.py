"""Three real `swarmp2p node` OS processes playing the second game, answer -> verify, added as
one registry row: the first starts the swarm with `--game answer-verify` (its signed schedule
names the game and says 2 stages a round), the others join and adopt it from its hello. On a
busy machine a node may skip a stage it got to too late, so the checks are that every position
of the checked round (the first every node played from its start) was played or skipped and
counted, that verify batches were verified and taken in somewhere, and that only answers are
ever trained on, in every round played until then. The stages themselves, round after round,
are the simulator's (tests/simulator/test_sim_answer_verify.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.nodes import NodeProcess, swarm_report, write_config
from tests.helpers.waiting import wait_for

GAME = "answer-verify"
ROUND_SECONDS = 20.0  # two 10-second stages: three tiny-model processes share two cores
STAGES = 2
VERIFY = 1
COUNTED = ("skipped", "abandoned", "trained_report_late")
"""Fates of a position a busy node did not complete, each recorded and counted."""


def by_position(node: NodeProcess) -> dict[tuple[int, int], dict[str, Any]]:
    return {(record["round"], record["stage"]): record for record in node.rounds()}


@pytest.mark.slow
def test_three_nodes_play_answer_verify(tmp_path: Path, warm_model: Path) -> None:
    config = write_config(tmp_path / "swarm.toml")
    nodes = [NodeProcess(tmp_path / f"node{i}", config, warm_model, []) for i in range(3)]
    nodes[0].args += ["--game", GAME, "--round-seconds", str(ROUND_SECONDS)]
    try:
        nodes[0].start()
        boot = nodes[0].info()
        assert (boot["schedule"]["game"], boot["schedule"]["stage_count"]) == (GAME, STAGES)
        for node in nodes[1:]:
            node.args += ["--bootstrap", boot["listen_addrs"][0]]
            node.start()
        infos = [boot] + [node.info() for node in nodes[1:]]
        assert all(info["schedule"]["game"] == GAME for info in infos)  # adopted from the hello
        ids = [info["peer_id"] for info in infos]
        wait_for(lambda: all(node.rounds() for node in nodes), 3 * ROUND_SECONDS, "a first record everywhere")
        first = max(node.rounds()[0]["round"] for node in nodes) + 1
        checked = [first]
        wait_for(
            lambda: all(max(by_position(node)) >= (checked[-1], STAGES - 1) for node in nodes),
            (len(checked) + 2) * ROUND_SECONDS + 30,
            f"both stages of round {first} on every node",
        )
        for node, peer_id in zip(nodes, ids, strict=True):
            records = by_position(node)
            for round_number in checked:
                # A node whose answer stage overran the whole next stage never opens that one.
                played = [
                    (round_number, stage) for stage in range(STAGES) if (round_number, stage) in records
                ]
                assert played, (peer_id, round_number)
                for position in played:
                    stage = position[1]
                    record = records[position]
                    assert record["completed"] or record["fate"] in COUNTED, (peer_id, record)
                    assert not record["rejected"].get("forged_reward"), (peer_id, record)
                    assert set(record["accepted_peers"]) <= set(ids) - {peer_id}
                    if stage == VERIFY:  # verdicts are shared and verified, never trained on
                        assert record["trained_local"] + record["trained_external"] == 0, (peer_id, record)
                        assert record["zero_advantage_groups"] == 0, (peer_id, record)  # never sampled

        def verify_taken() -> bool:
            return any(
                record["stage"] == VERIFY and record["completed"] and record["accepted_peers"]
                for node in nodes
                for record in node.rounds()
            )

        # A node's verdicts are verified by the others only once it took in their answers.
        wait_for(verify_taken, 3 * ROUND_SECONDS, "a verify batch verified and taken in by another node")
        for node, peer_id in zip(nodes, ids, strict=True):
            for record in node.rounds():  # whatever rounds the wait added: verdicts never trained on
                if record["stage"] == VERIFY:
                    assert record["trained_local"] + record["trained_external"] == 0, (peer_id, record)
        for node in nodes:
            # A node stops at its training step's next boundary: slow on a busy two-core machine.
            assert node.stop(signal.SIGTERM, timeout_s=60) == 0, node.output()
    except BaseException:
        print(swarm_report(nodes))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)
