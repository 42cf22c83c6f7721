"""The nemesis on three real `swarmp2p node` processes, each on its own host (network
namespace) behind netlab/netns_harness.py's switch at 50 ± 10 ms one-way and 2% loss:

1. node 1 is SIGKILLed mid-round and restarted at once on the same data dir;
2. node 2 is frozen (SIGSTOP) from 30% into a round for 1.5 rounds, then continued (SIGCONT);
3. the swarm is split into {0} | {1, 2} for two whole rounds, then healed;

and across all of it, every batch any node accepted is in exactly one training update or has a
recorded reason not to be (the round record's batch ledger), never trained twice, never lost.

One swarm for the whole module, the tests in this order. Assertions read rounds.jsonl and
/api/status, never logs. Needs root, iproute2 and /dev/net/tun; skipped otherwise.

The swarm shares the machine with whatever else runs (another worker's test, a busy host): the
tests hold it to what a user is promised there. Every round of every node is accounted for with
its fate and the nodes train on each other within a few rounds of each event; a round on the
nodes the nemesis left alone may still be reported late or abandoned for want of CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netlab.netns_harness import (
    NetnsNetwork,
    NetnsNode,
    batch_ledger,
    kill_and_restart,
    kill_outcome,
    kill_rejoin,
    missing_requirements,
    netns_swarm,
    next_round,
    pause_outcome,
    pause_past_a_round,
    pause_rejoin,
    split,
    split_outcome,
    wait_for,
)
from netlab.netns_harness import swarm_report as report
from tests.helpers.nodes import TEST_TRAINER
from tests.helpers.rounds import TRAINED, fates_accounted_for, trained_records

REASON = missing_requirements()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.in_order,  # steps of one scenario on one swarm
    pytest.mark.skipif(REASON is not None, reason=str(REASON)),
]

ROUND_SECONDS = 10.0
CONDITIONS = {"delay_ms": 50.0, "jitter_ms": 10.0, "loss": 0.02}
INTO = 0.3  # kill and pause 30% into a round: after the node published, before it trained
RECOVER_WITHIN = 3  # rounds after the nemesis by which everything is back
PAUSE_ROUNDS = 1.5  # frozen from 30% into round r to 80% into round r+1: past a whole round end
SPLIT_ROUNDS = 2
CONVERGE_WITHIN = 2  # rounds after the heal by which every node trains in the same round


@pytest.fixture(scope="module")
def swarm(
    tmp_path_factory: pytest.TempPathFactory, warm_model: Path
) -> Iterator[tuple[NetnsNetwork, list[NetnsNode]]]:
    root = tmp_path_factory.mktemp("nemesis")
    swarm = netns_swarm(root, 3, warm_model, ROUND_SECONDS, trainer_settings=TEST_TRAINER, **CONDITIONS)
    with swarm as (network, nodes):
        wait_for(lambda: all(node.rounds() for node in nodes), 150, "every node's first round")
        yield network, nodes


def wait_until_round(nodes: list[NetnsNode], last: int, until: Callable[[], bool] = lambda: False) -> None:
    """Poll until every node recorded round `last`, or `until()` holds sooner."""
    wait_for(
        lambda: until() or all(last in node.by_round() for node in nodes if not node.exited()),
        (last - next_round(nodes) + 3) * ROUND_SECONDS + 30,
        f"round {last} on every node",
    )


def kept_going(nodes: list[NetnsNode], since: int) -> None:
    """The nodes the nemesis left alone accounted for every round from `since` to the last they
    all recorded, and trained in one of them."""
    records = {node.index: node.by_round() for node in nodes}  # each rounds.jsonl read once
    rounds = range(since, min(max(by_round) for by_round in records.values()) + 1)
    for index, by_round in records.items():
        fates_accounted_for(by_round, rounds, f"node {index}")
        assert trained_records(by_round, rounds), (index, [by_round[r]["fate"] for r in rounds])


def first_round_all_trained(nodes: list[NetnsNode], rounds: range) -> int | None:
    """The first round in `rounds` in which every node's training step ran."""
    records = [node.by_round() for node in nodes]  # each rounds.jsonl read once, not per round
    return next((r for r in rounds if all(rec.get(r, {}).get("fate") in TRAINED for rec in records)), None)


def run_checked(nodes: list[NetnsNode], check: Callable[[], Any]) -> Any:
    """Run `check`; on failure print every node's rounds and log tail first."""
    try:
        return check()
    except BaseException:
        print(report(nodes))
        raise


def test_a_killed_node_restarts_with_its_identity_and_model_and_trains_again(
    swarm: tuple[NetnsNetwork, list[NetnsNode]],
) -> None:
    _, nodes = swarm
    victim = nodes[1]
    # It must have a checkpoint to resume from: at least one training update done.
    wait_for(lambda: max(victim.trained_steps(), default=0) >= 1, 4 * ROUND_SECONDS + 30, "a training step")
    event = kill_and_restart(nodes, 1, next_round(nodes), into=INTO)
    # Counted from the round it is back in: how long a restart takes (loading torch and the
    # model) depends on the machine's load, not on the swarm.
    last = event["back_round"] + RECOVER_WITHIN

    def recovered() -> bool:
        rejoin = kill_rejoin(nodes, event, last)
        return rejoin["trains_on_others"] is not None and None not in rejoin["others_train_on_it"].values()

    def check() -> None:
        wait_until_round(nodes, last, recovered)
        outcome = kill_outcome(nodes, event, last)
        assert outcome["same_peer_id"], outcome  # node.json and every record after the restart
        assert outcome["checkpoint_restored"] == 1, outcome
        # Resumed, not from scratch: from scratch its first update would be step 1 again.
        assert outcome["step_before"] >= 1 and outcome["first_step_after"] > outcome["step_before"], outcome
        assert outcome["trains_on_others"] is not None, outcome
        assert None not in outcome["others_train_on_it"].values(), outcome
        # The others kept playing and training while it was down and came back.
        kept_going([n for n in nodes if n is not victim], event["round"])

    run_checked(nodes, check)


def test_a_paused_node_catches_up_and_its_late_round_is_counted(
    swarm: tuple[NetnsNetwork, list[NetnsNode]],
) -> None:
    _, nodes = swarm
    event = pause_past_a_round(nodes, 2, next_round(nodes), into=INTO, rounds=PAUSE_ROUNDS)
    last = event["resumed_round"] + RECOVER_WITHIN

    def caught_up() -> bool:
        return pause_rejoin(nodes, event, last)["trains_on_others"] is not None

    def check() -> None:
        wait_until_round(nodes, last, caught_up)
        outcome = pause_outcome(nodes, event, last)
        assert outcome["alive"], outcome
        # The round it was frozen in is recorded (abandoned, or completed late), not lost.
        assert outcome["missed_rounds"][event["round"]] in ("abandoned", "completed"), outcome
        # Within the window, not by a set round: on a loaded host the nodes the pause left alone
        # miss rounds too (an idle-CPU CI run: node 0 abandoned rounds 8 and 9, node 2 resumed in
        # round 7 completed round 10).
        assert outcome["caught_up"] is not None and outcome["caught_up"] <= last, outcome
        assert outcome["trains_on_others"] is not None, outcome
        kept_going([n for n in nodes if n.index != event["node"]], event["round"])
        assert outcome["banned_by"] == [], outcome  # late is not lying

    run_checked(nodes, check)


def test_a_split_swarm_converges_after_the_heal_and_exchanges_again(
    swarm: tuple[NetnsNetwork, list[NetnsNode]],
) -> None:
    network, nodes = swarm
    groups = [[0], [1, 2]]
    event = split(network, nodes, groups, next_round(nodes), SPLIT_ROUNDS)
    healed = event["healed_round"]
    last = healed + RECOVER_WITHIN
    ids = {node.index: node.info()["peer_id"] for node in nodes}

    def exchanged() -> bool:
        return None not in split_outcome(nodes, event, last)["exchanged"].values()

    def check() -> None:
        wait_until_round(nodes, last, exchanged)
        outcome = split_outcome(nodes, event, last)
        inside = outcome["inside_rounds"]
        # Both sides kept playing rounds, and nothing crossed the cut.
        for node in nodes:
            fates_accounted_for(node.by_round(), inside, f"node {node.index}")
        assert sum(outcome["crossed_inside"].values()) == 0, outcome
        # The pair trained on each other inside the cut.
        for index, partner in ((1, 2), (2, 1)):
            records = nodes[index].by_round()
            assert any(ids[partner] in records[r]["external_peers_trained_on"] for r in inside), (
                index,
                outcome,
            )
        # Converged: a round soon after the heal in which every node trained.
        converged = first_round_all_trained(nodes, range(healed, last + 1))
        assert converged is not None and converged < healed + CONVERGE_WITHIN, (converged, outcome)
        assert None not in outcome["exchanged"].values(), outcome

    run_checked(nodes, check)


def test_no_accepted_batch_was_trained_twice_or_lost(swarm: tuple[NetnsNetwork, list[NetnsNode]]) -> None:
    _, nodes = swarm
    ledger = batch_ledger(nodes)
    tally = ledger["tally"]
    assert ledger["violations"] == [], ledger
    assert tally.get("accepted", 0) > 20 and tally.get("trained", 0) > 0, tally
    # Three nodes never fill n_external: a batch is left out only when it teaches nothing or
    # its round was abandoned (the paused node's).
    assert set(tally) <= {"accepted", "trained", "zero_advantage", "round_abandoned"}, tally
