"""A real answer -> critique -> resolve swarm for tests: its stage timing, how it starts, and its
records by (round, stage)."""

from __future__ import annotations

from typing import Any

from tests.helpers.nodes import NodeProcess

ROUND_SECONDS = 24.0  # three 8-second stages: three tiny-model processes share two cores

STAGES = 3


def start_acr_swarm(nodes: list[NodeProcess]) -> list[dict[str, Any]]:
    """Start nodes[0] with the game (it founds the swarm: its signed schedule says 3 stages), then
    the others bootstrapping from it; each node's info, in order."""
    nodes[0].args += ["--game", "answer-critique-resolve", "--round-seconds", str(ROUND_SECONDS)]
    nodes[0].start()
    boot = nodes[0].info()
    assert (boot["schedule"]["game"], boot["schedule"]["stage_count"]) == ("answer-critique-resolve", STAGES)
    for node in nodes[1:]:
        node.args += ["--bootstrap", boot["listen_addrs"][0]]
        node.start()
    return [boot] + [node.info() for node in nodes[1:]]


def by_position(node: NodeProcess) -> dict[tuple[int, int], dict[str, Any]]:
    return {(record["round"], record["stage"]): record for record in node.rounds()}
