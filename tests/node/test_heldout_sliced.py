"""Held-out evaluation in slices on the node's defaults (swarmp2p/heldout.py, sliced): on the
default 30 s round, with a whole evaluation lasting 60.4 s (measured on a busy 2-core host: the
line "needs about 76 s but a 30 s round leaves the worker about 12 s" came from it), three peers
still complete a held-out point at least every 10 rounds, every point answers every held-out
question exactly once, and no round is late for it. Real Peers on the simulator's in-memory
network, on virtual time; the policy's evaluation is answered in the trainer's units
(trainer.evaluation.unit_ranges) and costs virtual time per question."""

from __future__ import annotations

import hashlib
from typing import Any

import trio
import trio.testing

from protocol.envelope import peer_id_from_seed
from protocol.messages import QuestionRef, SwarmSchedule
from protocol.questions import EVAL_INDEX_BASE
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy, SimPolicyParams
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.heldout import EvalSettings
from swarmp2p.node_config import NODE_TRAINER_DEFAULTS
from swarmp2p.node_policy import eval_settings
from swarmp2p.peer import Peer, PeerSettings
from swarmp2p.schedule import ScheduleCoordinator
from trainer.config import TrainerConfig
from trainer.evaluation import unit_ranges

ROUND_MS = 30_000  # NodeConfig.round_seconds
GENESIS_MS = 1_000
SWARM = "sliced"
WHOLE_EVAL_S = 60.4  # one whole evaluation of the default held-out set on the busy host
CHUNK = 64  # completions per generation batch (trainer/policy.py)


class SlicedSimPolicy(SimPolicy):
    """A simulated learner whose held-out evaluation is answered a unit at a time, each unit
    costing its share of WHOLE_EVAL_S; it remembers which questions each evaluation asked."""

    questions = 100
    samples = 4

    def sliced_evaluation(self) -> SimSlices:
        return SimSlices(self)


class SimSlices:
    def __init__(self, policy: SlicedSimPolicy) -> None:
        self.policy = policy
        task = policy.registry.task_names()[0]
        self.refs = [QuestionRef(task, 20261123, EVAL_INDEX_BASE + i) for i in range(policy.questions)]
        self.units = unit_ranges(len(self.refs), policy.samples, CHUNK)
        self.unit_steps: list[int] = []
        self.asked: list[QuestionRef] = []

    @property
    def done(self) -> int:
        return len(self.unit_steps)

    @property
    def complete(self) -> bool:
        return self.done == len(self.units)

    def answer_next(self) -> int:
        unit = self.units[self.done]
        self.policy.pending_cost_s += WHOLE_EVAL_S * len(unit) / len(self.refs)
        self.asked.extend(self.refs[unit.start : unit.stop])
        self.unit_steps.append(self.policy.steps)
        return len(unit)

    def drop_last(self) -> None:
        unit = self.units[self.done - 1]
        del self.asked[-len(unit) :]
        self.unit_steps.pop()

    def result(self) -> dict[str, Any]:
        assert self.complete
        per_question = [float(int(hashlib.sha256(repr(ref).encode()).digest()[0]) % 2) for ref in self.refs]
        return {
            "step": self.unit_steps[-1],
            "accuracy": sum(per_question) / len(per_question),
            "per_question": per_question,
            "questions": len(self.refs),
            "asked": list(self.asked),
            "refs": list(self.refs),
            "seconds": WHOLE_EVAL_S,
        }


def run_swarm(count: int, rounds: int, evaluation: EvalSettings, params: SimPolicyParams) -> list[Peer]:
    clock = TrioClock(0)
    coordinator = ScheduleCoordinator(SwarmSchedule(SWARM, GENESIS_MS, ROUND_MS, 1, 5), clock)
    world = SimWorld(
        LinkModel(), seed=1, now_ms=clock.now_ms, round_of=lambda now: max(0, now - GENESIS_MS) // ROUND_MS
    )
    registry = SimTaskRegistry()
    settings = PeerSettings(swarm_id=SWARM, seed=5, tasks=registry.task_names(), evaluation=evaluation)
    store = CheckpointStore()
    peers = []
    for index in range(count):
        seed = hashlib.sha256(f"peer-{index}".encode()).digest()
        port = world.attach(peer_id_from_seed(seed))
        policy = SlicedSimPolicy(port.local_peer_id, registry, seed=5, params=params, store=store)

        async def offload(fn, *args, policy=policy):  # type: ignore[no-untyped-def]
            result = fn(*args)  # inline, then the policy's virtual compute time
            await trio.sleep(policy.take_cost())
            return result

        peers.append(Peer(settings, seed, port, coordinator, policy, registry, clock, offload=offload))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(world.run_deliveries)
            for peer in peers:
                nursery.start_soon(peer.run)
            await trio.sleep_until((GENESIS_MS + rounds * ROUND_MS - 500) / 1000)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return peers


def test_on_the_default_round_three_peers_show_a_held_out_point_at_least_every_10_rounds() -> None:
    evaluation = eval_settings(TrainerConfig(tasks=("leg_counting",), **NODE_TRAINER_DEFAULTS))
    assert evaluation.sliced and evaluation.every == 5 and evaluation.questions == 100
    # A busy host's round: generating 4 questions takes 6 s, training on 3 peers' 12 groups 6 s.
    params = SimPolicyParams(generate_cost_s=1.5, train_cost_s=0.5)
    rounds = 40
    peers = run_swarm(3, rounds, evaluation, params)
    for peer in peers:
        completed = [record for record in peer.history if record.completed]
        assert len(completed) == rounds, [(r.round, r.fate) for r in peer.history if not r.completed]
        assert all(record.finished_ms <= GENESIS_MS + (record.round + 1) * ROUND_MS for record in completed)
        points = [record for record in peer.history if record.eval is not None]
        where = [record.round for record in points]
        assert where and where[0] <= 10, where
        gaps = [b - a for a, b in zip([-1, *where], where, strict=False)]
        assert max(gaps) <= 10, where
        assert len(points) >= rounds // 10
        for record in points:
            result = record.eval
            assert result["asked"] == result["refs"]  # every question once, in the set's order
            assert sum(piece["questions"] for piece in result["slices"]) == 100
            # The point is that of the newest weights it includes: the round it completed in
            # (after that round's training) or, completed while collecting, the one before.
            assert result["round"] in (record.round, record.round - 1)
            assert result["round"] == result["slices"][-1]["round"]
            assert len(result["slices"]) > 1  # spread over several rounds' spare moments
        assert peer.counters["eval_failed"] == 0
        status = peer.evaluation.status()
        assert [entry["round"] for entry in status["eval_history"]] == [r.eval["round"] for r in points]


def test_a_new_evaluation_starts_every_n_rounds_after_the_last_one_started() -> None:
    # Units that fit easily: one evaluation completes in its first round, so points come every
    # `every` rounds, counted from when each started; the first (before training) is the start point.
    evaluation = EvalSettings(every=3, before_train=True, questions=100, sliced=True)
    params = SimPolicyParams(generate_cost_s=0.25, train_cost_s=0.1)
    global WHOLE_EVAL_S
    saved, WHOLE_EVAL_S = WHOLE_EVAL_S, 6.0
    try:
        [peer] = run_swarm(1, 10, evaluation, params)
    finally:
        WHOLE_EVAL_S = saved
    history = peer.evaluation.status()["eval_history"]
    assert [entry["round"] for entry in history] == [None, 2, 5, 8]
    assert peer.history[0].eval["slices"] == [{"round": None, "step": 0, "questions": 100}]


def test_slices_say_which_rounds_weights_answered_how_many_questions() -> None:
    from swarmp2p.heldout import describe
    from swarmp2p.heldout_slices import slices_of

    units = unit_ranges(100, 4, CHUNK)  # 6 units of 16 questions and one of 4
    slices = slices_of(units, [0, 0, 1, 1, 1, 2, 2], [None, None, 0, 0, 0, 1, 1])
    assert slices == [
        {"round": None, "step": 0, "questions": 32},
        {"round": 0, "step": 1, "questions": 48},
        {"round": 1, "step": 2, "questions": 20},
    ]
    line = describe({"accuracy": 0.25, "reward": 0.5, "slices": slices})
    assert line == "acc 0.250 reward 0.500 (in 3 slices, weights of start..round 1)"
    one = describe({"accuracy": 0.25, "reward": 0.5, "slices": slices[:1]})
    assert one == "acc 0.250 reward 0.500"  # one set of weights: nothing to say
