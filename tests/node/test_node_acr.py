"""Three real `swarmp2p node` OS processes playing answer -> critique -> resolve, with two hostile
hosts forging critiques in one round. The first node starts the swarm with `--game
answer-critique-resolve` (its signed schedule says 3 stages a round), the others join and adopt
it. One swarm serves every test here (`acr_run`, started once for the module):

- the game: every position of the checked rounds was played or skipped and counted, critique
  batches were verified and taken in, and only the stages the game trains are trained;
- forged critiques (tests/helpers/acr_forgers.py): the liar's re-scored reward is rejected as
  `forged_reward` and bans it, the misquoter's reference to a missing group as `bad_input`;
  neither is ever accepted, built on (resolved) or trained on, and the honest critiques of that
  round still verify and feed the resolve stage. Fails if critiques were not re-scored (the
  liar's batch would be accepted) or their references not resolved (the misquoter's would be);
- the nodes stop cleanly on SIGTERM afterwards.

On a busy machine a node may finish a stage late or skip one: every position it did not complete
has a counted fate; the attacked round's critique stage, where the forgeries come in, is played.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.helpers.acr_forgers import api_status, attack
from tests.helpers.acr_swarm import ROUND_SECONDS, STAGES, by_position, start_acr_swarm
from tests.helpers.nodes import NodeProcess, swarm_report, write_config
from tests.helpers.waiting import free_port, wait_for

pytestmark = pytest.mark.slow

COUNTED = ("skipped", "abandoned", "trained_report_late")
"""Fates of a position a busy node did not complete, each recorded and counted."""
CRITIQUE = 1


@attrs.frozen
class AcrRun:
    """What the module's swarm did: its honest nodes, the hostile hosts, and what was read from
    each node before it was stopped."""

    nodes: list[NodeProcess]
    ids: list[str]
    hostile: dict[str, str]  # role -> peer id
    attacked: int
    checked: list[int]
    statuses: list[dict[str, Any]]  # each node's /api/status after the checked rounds
    stop_codes: list[int | None]
    critique_seen: bool  # a critique batch taken in somewhere, within a few rounds of the checked ones


def critique_taken(nodes: list[NodeProcess]) -> bool:
    """A completed critique stage somewhere took in another node's critique batch."""
    return any(
        record["stage"] == CRITIQUE and record["completed"] and record["accepted_peers"]
        for node in nodes
        for record in node.rounds()
    )


def eventually(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether `condition` came true within `timeout_s` (polled like `wait_for`)."""
    try:
        return bool(wait_for(condition, timeout_s, "the condition"))
    except AssertionError:
        return False


@pytest.fixture(scope="module")
def acr_run(tmp_path_factory: pytest.TempPathFactory, warm_model: Path) -> Iterator[AcrRun]:
    """The whole scenario, run once: the tests only read what it left (any order works)."""
    tmp_path = tmp_path_factory.mktemp("acr")
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
        wait_for(lambda: all(node.rounds() for node in nodes), 3 * ROUND_SECONDS, "a first record everywhere")
        schedule = boot["schedule"]
        attacked = (int(time.time() * 1000) - schedule["genesis_ms"]) // schedule["round_ms"] + 1
        hostile = attack(boot, honest, attacked)
        checked = [attacked, attacked + 1]
        wait_for(
            lambda: all(max(by_position(node)) >= (checked[-1], STAGES - 1) for node in nodes),
            (len(checked) + 2) * ROUND_SECONDS + 30,
            f"every stage of rounds {checked} on every node",
        )
        # Usually long true by now; on a busy host a critique stage may have been skipped. Asked
        # here and asserted by the test that is about it, so that the others still run.
        critique_seen = eventually(lambda: critique_taken(nodes), 3 * ROUND_SECONDS)
        statuses = [api_status(port) for port in ports]
        # A node stops at its training step's next boundary: slow on a busy two-core machine.
        stop_codes = [node.stop(signal.SIGTERM, timeout_s=60) for node in nodes]
        ids = [peer for peer, _ in honest]
        yield AcrRun(nodes, ids, hostile, attacked, checked, statuses, stop_codes, critique_seen)
    except BaseException:
        print(swarm_report(nodes))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)


def test_three_nodes_play_every_stage_of_answer_critique_resolve(acr_run: AcrRun) -> None:
    run = acr_run
    for node, peer_id in zip(run.nodes, run.ids, strict=True):
        records = by_position(node)
        for round_number in run.checked:
            # A node whose stage overran the whole next stage never opens that one.
            played = [(round_number, s) for s in range(STAGES) if (round_number, s) in records]
            assert played, (peer_id, round_number)
            for position in played:
                record = records[position]
                assert record["completed"] or record["fate"] in COUNTED, (peer_id, record)
                assert set(record["accepted_peers"]) <= set(run.ids) - {peer_id}, (peer_id, record)
                if position[1] == CRITIQUE:  # critiques are shared and verified, never trained on
                    assert record["trained_local"] + record["trained_external"] == 0, (peer_id, record)
                    assert record["zero_advantage_groups"] == 0, (peer_id, record)  # never sampled
    # Critiques of another peer verified against the answers they reference and taken in,
    # somewhere. (A resolve needs a critique stage that finished in time on a busy machine
    # first; its verification is pinned by tests/protocol/test_protocol_acr.py.)
    assert run.critique_seen, "no critique batch taken in by another node"


def test_nodes_reject_forged_critiques_and_never_build_on_them(acr_run: AcrRun) -> None:
    run = acr_run
    for node, peer_id, status in zip(run.nodes, run.ids, run.statuses, strict=True):
        records = by_position(node)
        rejected = records[(run.attacked, CRITIQUE)]["rejected"]
        # Each forged critique rejected with its reason, in the critique stage it came in.
        assert rejected.get("forged_reward", 0) >= 1, (peer_id, records[(run.attacked, CRITIQUE)])
        assert rejected.get("bad_input", 0) >= 1, (peer_id, records[(run.attacked, CRITIQUE)])
        assert run.hostile["liar"] in status["banned"], (peer_id, status["banned"])  # proof of lying
        assert set(status["banned"]) <= set(run.hostile.values()), status["banned"]
        for round_number in run.checked:
            for stage in range(STAGES):
                record = records.get((round_number, stage))
                if record is None:  # overran by the stage before: counted there
                    continue
                assert record["completed"] or record["fate"] in COUNTED, (peer_id, record)
                # Never accepted, never built on, never trained on.
                assert set(record["accepted_peers"]) <= set(run.ids) - {peer_id}, (peer_id, record)
                assert set(record["external_peers_trained_on"]) <= set(run.ids), (peer_id, record)
                trained = record["trained_local"] + record["trained_external"]
                if record["completed"] and stage == CRITIQUE:  # never sampled for training
                    assert trained == 0 and record["zero_advantage_groups"] == 0, (peer_id, record)
                elif record["completed"]:
                    # A trained stage learns from what it has, unless every group it had scored
                    # alike (the tiny model often answers a resolve all wrong): nothing to learn.
                    assert trained > 0 or record["zero_advantage_groups"] > 0, (peer_id, record)
                if (round_number, stage) != (run.attacked, CRITIQUE):
                    # No honest batch is ever taken for a forgery.
                    assert not record["rejected"].get("forged_reward"), (peer_id, record)
                    assert not record["rejected"].get("bad_input"), (peer_id, record)
        # The honest critiques of the checked rounds still verified and fed the resolve stage.
        taken = {
            stage: any(records.get((r, stage), {}).get("accepted_peers") for r in run.checked)
            for stage in (1, 2)
        }
        assert taken == {1: True, 2: True}, (peer_id, taken)


def test_nodes_stop_cleanly_on_sigterm_after_the_attack(acr_run: AcrRun) -> None:
    for node, code in zip(acr_run.nodes, acr_run.stop_codes, strict=True):
        assert code == 0, node.output()
        assert "stopped" in node.output(), node.output()
