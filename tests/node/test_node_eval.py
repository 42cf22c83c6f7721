"""Held-out evaluation in the round loop (swarmp2p/heldout.py): it runs when due and lands in the
round record, the status and the round line; it is deferred, and says so, when it would not fit
before the next round; `swarmp2p node`'s flags map onto the [trainer] eval settings. Real Peers
on the simulator's in-memory network, on virtual time."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from typer.testing import CliRunner

from protocol.envelope import peer_id_from_seed
from protocol.messages import SwarmSchedule
from protocol.questions import EVAL_INDEX_BASE
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy, SimPolicyParams
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.config import ConfigError, ConfigRegistry, load_config
from swarmp2p.heldout import EvalSettings, HeldOutEvaluation
from swarmp2p.node_config import NODE_TRAINER_DEFAULTS
from swarmp2p.node_policy import eval_settings
from swarmp2p.peer import Peer, PeerSettings, RoundRecord
from swarmp2p.round_log import RoundLog
from swarmp2p.schedule import ScheduleCoordinator
from trainer.config import TrainerConfig

ROUND_MS = 10_000
GENESIS_MS = 10_000  # peers start at 0: an evaluation before training has time to run
SWARM = "t"


class Swarm:
    """`count` honest SimPolicy peers; every call costs its virtual compute time."""

    def __init__(
        self, count: int, evaluation: EvalSettings, params: SimPolicyParams, policy_cls: type = SimPolicy
    ) -> None:
        self.policy_cls = policy_cls
        self.clock = TrioClock(0)
        self.coordinator = ScheduleCoordinator(SwarmSchedule(SWARM, GENESIS_MS, ROUND_MS, 1, 5), self.clock)
        self.world = SimWorld(
            LinkModel(),
            seed=1,
            now_ms=self.clock.now_ms,
            round_of=lambda now: max(0, now - GENESIS_MS) // ROUND_MS,
        )
        self.registry = SimTaskRegistry()
        self.settings = PeerSettings(
            swarm_id=SWARM, seed=5, tasks=self.registry.task_names(), evaluation=evaluation
        )
        self.store = CheckpointStore()
        self.policies: list[SimPolicy] = []
        self.calls: list[list[tuple[str, int, int]]] = []  # per peer: (policy call, start ms, end ms)
        self.peers = [self._make_peer(i, params) for i in range(count)]
        self.statuses: list[dict[str, Any]] = []  # Peer.status() at the end of the run

    def _make_peer(self, index: int, params: SimPolicyParams) -> Peer:
        seed = hashlib.sha256(f"peer-{index}".encode()).digest()
        port = self.world.attach(peer_id_from_seed(seed))
        policy = self.policy_cls(port.local_peer_id, self.registry, seed=5, params=params, store=self.store)
        self.policies.append(policy)
        calls: list[tuple[str, int, int]] = []
        self.calls.append(calls)

        async def offload(fn, *args):  # type: ignore[no-untyped-def]
            started = self.clock.now_ms()
            result = fn(*args)  # inline, then the policy's virtual compute time
            await trio.sleep(policy.take_cost())
            calls.append((fn.__name__, started, self.clock.now_ms()))
            return result

        return Peer(
            self.settings, seed, port, self.coordinator, policy, self.registry, self.clock, offload=offload
        )

    def run(self, rounds: int) -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.world.run_deliveries)
                for peer in self.peers:
                    nursery.start_soon(peer.run)
                # Half a second before round `rounds` opens: rounds 0 .. rounds - 1 are over.
                await trio.sleep_until((GENESIS_MS + rounds * ROUND_MS - 500) / 1000)
                self.statuses = [peer.status() for peer in self.peers]
                nursery.cancel_scope.cancel()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def assert_rounds_on_time(peer: Peer, rounds: int) -> None:
    """Every round completed (none skipped or abandoned) and finished before the next began."""
    completed = [record for record in peer.history if record.completed]
    assert [record.round for record in completed] == list(range(rounds))
    assert not [record for record in peer.history if record.skipped or not record.completed]
    for record in completed:
        assert record.finished_ms <= GENESIS_MS + (record.round + 1) * ROUND_MS, record
    assert peer.counters["internal_error"] == 0


def test_evaluations_run_when_due_and_land_in_records_and_status() -> None:
    # 2 questions x 4 tasks x 0.1 s = 0.8 s: fits in the ~2 s left after training.
    params = SimPolicyParams(eval_questions=2, eval_generations_to_log=3)
    swarm = Swarm(2, EvalSettings(every=2, before_train=True, questions=8), params)
    swarm.run(rounds=7)
    for peer, policy, status in zip(swarm.peers, swarm.policies, swarm.statuses, strict=True):
        assert_rounds_on_time(peer, 7)
        evaluated = [record.round for record in peer.history if record.eval is not None]
        assert evaluated == [1, 3, 5]  # after every 2nd round played
        assert all(record.eval_deferred is None for record in peer.history)
        for record in peer.history:
            if record.eval is None:
                continue
            result = record.eval
            assert result["round"] == record.round
            assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["reward"] <= 1.0
            assert set(result["per_task"]) == set(swarm.registry.task_names())
            assert all(stats["n"] == 2 for stats in result["per_task"].values())
            assert result["questions"] == 8 and result["simulated"] is True
            assert len(result["samples"]) == 3
            assert result["step"] == record.round + 1  # one training step per round played
            assert isinstance(result["accuracy_change"], float)
            saved = json.loads(json.dumps(record.to_json()))
            assert saved["eval"]["per_task"] == result["per_task"]
        history = status["eval_history"]
        assert [entry["round"] for entry in history] == [None, 1, 3, 5]  # None: before training
        assert history[0]["step"] == 0
        assert status["eval"] == peer.history[5].eval
        assert status["eval"]["accuracy"] == history[-1]["accuracy"]
        assert status["eval_deferred"] is None
        assert status["counters"]["evaluations"] == 4
        assert policy.steps == 7


def test_an_evaluation_that_would_not_fit_is_deferred_and_said(caplog: pytest.LogCaptureFixture) -> None:
    # 16 x 4 x 0.1 s = 6.4 s (measured before round 0): never fits in the ~2 s left after
    # training, nor in the ~4 s collect window. (No probes here: see the probe tests.)
    caplog.set_level(logging.DEBUG, logger="swarmp2p.peer")  # the round line says it; the log at debug
    params = SimPolicyParams(eval_questions=16)
    swarm = Swarm(2, EvalSettings(every=2, before_train=True, questions=64, probe_after=0), params)
    swarm.run(rounds=6)
    for peer, status in zip(swarm.peers, swarm.statuses, strict=True):
        assert_rounds_on_time(peer, 6)
        assert [record.round for record in peer.history if record.eval is not None] == []
        deferred = [record for record in peer.history if record.eval_deferred is not None]
        # Due from the 2nd round played on, and still due after each deferral.
        assert [record.round for record in deferred] == [1, 2, 3, 4, 5]
        for record in deferred:
            assert record.eval_deferred["needed_s"] == pytest.approx(1.25 * 6.4 + 0.5)
            assert record.eval_deferred["left_s"] < record.eval_deferred["needed_s"]
        assert status["counters"]["eval_deferred"] == 5
        assert status["counters"]["evaluations"] == 1  # the one before training
        assert status["eval_deferred"] == deferred[-1].eval_deferred
        assert [entry["round"] for entry in status["eval_history"]] == [None]
    said = [r.getMessage() for r in caplog.records if "eval deferred" in r.getMessage()]
    assert len(said) == 10 and "8.5 s needed" in said[0]


class OutlierFirst(SimPolicy):
    """Its first evaluation (before training) takes 8 s more: measured under a load spike."""

    evaluated = 0

    def evaluate(self) -> dict[str, Any]:
        self.evaluated += 1
        if self.evaluated == 1:
            self.pending_cost_s += 8.0
        return super().evaluate()


class Cancellable(SimPolicy):
    """The trainer's cancel contract: after cancel(), generate/train refuse until reset_cancel()."""

    cancellable = True
    cancelled = False
    cancels = resets = 0

    def cancel(self) -> None:
        self.cancelled = True
        self.cancels += 1

    def reset_cancel(self) -> None:
        self.cancelled = False
        self.resets += 1

    def generate(self, questions: Any) -> Any:
        assert not self.cancelled, "generate called with the evaluation's cancel still set"
        return super().generate(questions)

    def train(self, groups: Any) -> Any:
        assert not self.cancelled, "train called with the evaluation's cancel still set"
        return super().train(groups)


def test_after_deferrals_in_a_row_a_probe_replaces_an_outlier_measurement() -> None:
    # The before-training evaluation took 8.8 s (a load spike): by that estimate it never fits.
    # After 2 deferrals a probe runs anyway, takes its real 0.8 s, and evaluations resume.
    params = SimPolicyParams(eval_questions=2)
    settings = EvalSettings(every=1, before_train=True, questions=8, probe_after=2)
    swarm = Swarm(1, settings, params, policy_cls=OutlierFirst)
    swarm.run(rounds=6)
    [peer], [status] = swarm.peers, swarm.statuses
    assert_rounds_on_time(peer, 6)
    assert [r.round for r in peer.history if r.eval_deferred is not None] == [0, 1]
    assert [e["round"] for e in status["eval_history"]] == [None, 1, 2, 3, 4, 5]
    assert status["eval_history"][1]["step"] == 2  # the probe, in round 2's collect window
    assert peer.evaluation.estimate_s == pytest.approx(0.8)
    assert "eval_stopped" not in status["counters"] and "eval_failed" not in status["counters"]


def test_a_probe_that_cannot_finish_is_stopped_at_the_deadline_and_said() -> None:
    # 6.4 s evaluations, probes every 2 deferrals: each probe is stopped (cancel() for a policy
    # that has it, the virtual compute time cut short) before the deadline; rounds stay on time.
    params = SimPolicyParams(eval_questions=16)
    settings = EvalSettings(every=1, before_train=True, questions=64, probe_after=2)
    swarm = Swarm(2, settings, params, policy_cls=Cancellable)
    swarm.run(rounds=7)
    for peer, policy, status in zip(swarm.peers, swarm.policies, swarm.statuses, strict=True):
        assert_rounds_on_time(peer, 7)
        stopped = [r.eval_deferred for r in peer.history if "stopped_after_s" in (r.eval_deferred or {})]
        assert len(stopped) == status["counters"]["eval_stopped"] >= 2
        for deferral in stopped:
            assert deferral["stopped_after_s"] == pytest.approx(deferral["left_s"] - 0.5, abs=0.01)
        assert status["counters"]["evaluations"] == 1  # only the one before training finished
        assert isinstance(policy, Cancellable)
        # Every cancel() was reset (on virtual time the cancel scope may end it first: no cancel).
        assert policy.cancels == policy.resets and not policy.cancelled
        assert "generate_failed" not in status["counters"] and "train_failed" not in status["counters"]
        assert [r.round for r in peer.history if r.external_peers_trained_on] == list(range(7))


def test_a_running_evaluation_in_a_worker_thread_is_stopped_through_cancel() -> None:
    import threading
    import time

    from swarmp2p.heldout import _bounded

    class Slow:
        def __init__(self, seconds: float) -> None:
            self.seconds = seconds
            self.flag = threading.Event()
            self.resets = 0

        cancellable = True

        def evaluate(self) -> dict[str, Any]:
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                if self.flag.is_set():
                    raise RuntimeError("cancelled")  # the trainer raises its Cancelled
                time.sleep(0.01)
            return {"accuracy": 1.0}

        def cancel(self) -> None:
            self.flag.set()

        def reset_cancel(self) -> None:
            self.flag.clear()
            self.resets += 1

    async def offload(fn, *args):  # type: ignore[no-untyped-def]
        return await trio.to_thread.run_sync(fn, *args)

    async def main(policy: Slow, budget: float) -> tuple[Any, bool, float]:
        started = time.monotonic()
        result, stopped = await _bounded(policy, offload, budget)
        return result, stopped, time.monotonic() - started

    slow = Slow(30.0)
    result, stopped, took = trio.run(main, slow, 0.2)
    assert (result, stopped) == (None, True) and took < 5.0 and slow.resets == 1
    assert not slow.flag.is_set()  # reset: the next generate/train runs
    fast = Slow(0.0)
    assert trio.run(main, fast, 5.0)[:2] == ({"accuracy": 1.0}, False) and fast.resets == 0


def test_a_deferred_evaluation_runs_in_the_next_collect_window_when_it_fits_there() -> None:
    # 6 x 4 x 0.1 s = 2.4 s, needing 3.5 s: more than the ~2 s left after training, less than
    # the ~4 s between publishing (2 s of generation) and the collect deadline (6 s in).
    swarm = Swarm(
        2, EvalSettings(every=2, before_train=True, questions=24), SimPolicyParams(eval_questions=6)
    )
    swarm.run(rounds=7)
    for peer, status, calls in zip(swarm.peers, swarm.statuses, swarm.calls, strict=True):
        assert_rounds_on_time(peer, 7)
        assert [r.round for r in peer.history if r.eval_deferred is not None] == [1, 3, 5]
        ran = [r for r in peer.history if r.eval is not None]
        assert [r.round for r in ran] == [2, 4, 6]  # in the next round's collect window...
        for record in ran:
            assert record.eval["round"] == record.round - 1  # ...measuring the deferred step's model
            assert record.eval["step"] == record.round
            assert record.external_peers_trained_on  # the other peer's batch arrived and was used
        # Each ran within the collect window: after generating, done before the collect
        # deadline (6 s into the round), and the train step started on time right after it.
        evals = [(start, end) for name, start, end in calls if name == "evaluate"][1:]  # [0]: before
        trains = [start for name, start, _ in calls if name == "train"]
        assert len(evals) == 3
        for (start, end), record in zip(evals, ran, strict=True):
            round_start = GENESIS_MS + record.round * ROUND_MS
            assert round_start + 2000 <= start and end <= round_start + 6000
            assert round_start + 6000 in trains  # training at the deadline: it did not wait
        assert [e["round"] for e in status["eval_history"]] == [None, 1, 3, 5]
        assert status["counters"]["eval_deferred"] == 3 and status["counters"]["evaluations"] == 4


def test_without_a_measurement_the_first_estimate_comes_from_generation_time() -> None:
    # No evaluation before training: the first estimate scales this round's generation time
    # (0.5 s x 4 questions = 2 s) to the 64 held-out questions: 32 s, x 1.25 + 0.5 s.
    swarm = Swarm(1, EvalSettings(every=1, before_train=False, questions=64), SimPolicyParams())
    swarm.run(rounds=3)
    [peer] = swarm.peers
    assert_rounds_on_time(peer, 3)
    assert [record.eval_deferred["needed_s"] for record in peer.history] == [40.5, 40.5, 40.5]
    assert peer.counters["evaluations"] == 0 and swarm.statuses[0]["eval"] is None


def test_a_small_evaluation_estimated_from_generation_runs_and_then_uses_its_own_time() -> None:
    params = SimPolicyParams(eval_questions=1)
    swarm = Swarm(1, EvalSettings(every=1, before_train=False, questions=4), params)
    swarm.run(rounds=4)
    [peer] = swarm.peers
    assert_rounds_on_time(peer, 4)
    assert [record.round for record in peer.history if record.eval is not None] == [0, 1, 2, 3]
    assert peer.evaluation.estimate_s == pytest.approx(0.4)  # 4 questions x 0.1 s, measured
    assert peer.history[0].eval["accuracy_change"] is None
    assert peer.history[1].eval["accuracy_change"] == pytest.approx(
        peer.history[1].eval["accuracy"] - peer.history[0].eval["accuracy"]
    )


def test_evaluation_is_off_unless_asked_and_a_policy_without_evaluate_is_left_alone() -> None:
    swarm = Swarm(1, EvalSettings(), SimPolicyParams())
    swarm.run(rounds=3)
    [peer] = swarm.peers
    assert all(record.eval is None and record.eval_deferred is None for record in peer.history)
    assert swarm.statuses[0]["eval_history"] == [] and peer.counters["evaluations"] == 0


def test_a_failing_evaluation_is_counted_and_waits_for_its_next_turn() -> None:
    from collections import Counter

    counters: Counter[str] = Counter()
    schedule = HeldOutEvaluation(EvalSettings(every=2, before_train=False), counters)

    class Broken:
        cancellable = False  # PolicyPort: only the cancel scope stops it

        def evaluate(self) -> dict[str, Any]:
            raise RuntimeError("no model")

    async def offload(fn, *args):  # type: ignore[no-untyped-def]
        return fn(*args)

    async def rounds() -> list[Any]:
        return [await schedule.after_round(Broken(), offload, lambda: 0, r, 10_000, 1.0, 4) for r in range(4)]

    assert trio.run(rounds) == [(None, None)] * 4
    assert counters["eval_failed"] == 2  # rounds 1 and 3, not every round after the failure


# ---- the simulated learner's evaluate() --------------------------------------------------------


def test_sim_policy_evaluate_has_the_trainer_shape_and_is_deterministic() -> None:
    registry = SimTaskRegistry()
    params = SimPolicyParams(eval_questions=50, eval_generations_to_log=2)
    policy = SimPolicy("p", registry, seed=3, params=params)
    before = policy.evaluate()
    assert policy.take_cost() == pytest.approx(0.1 * 50 * len(registry.task_names()))
    assert before == policy.evaluate()  # the same policy: the same result
    assert set(before) >= {"step", "accuracy", "reward", "questions", "per_task", "samples", "seconds"}
    assert before["simulated"] is True and before["questions"] == 200
    assert [sample["index"] >= EVAL_INDEX_BASE for sample in before["samples"]] == [True, True]
    assert [sample["task"] for sample in before["samples"]] == list(registry.task_names()[:2])  # spread
    for sample in before["samples"]:
        assert set(sample) == {"task", "index", "completion", "reference", "correct", "reward"}
        assert sample["correct"] == (sample["reward"] >= 1.0)
    # Evaluating does not move generation: a twin that never evaluated generates the same.
    twin = SimPolicy("p", registry, seed=3, params=params)
    question = registry.task_names()[0]
    from protocol.messages import QuestionRef

    refs = [QuestionRef(question, 1, i) for i in range(3)]
    assert policy.generate(refs) == twin.generate(refs)
    # A skilled policy scores higher on the same held-out set.
    policy.skills = dict.fromkeys(policy.skills, 0.999)
    policy.format_skill = 0.999
    assert policy.evaluate()["accuracy"] > before["accuracy"] + 0.5


# ---- the node: round line, rounds.jsonl, flags ------------------------------------------------


def _record(**changes: Any) -> RoundRecord:
    fields: dict[str, Any] = {
        "round": 7,
        "stage": 0,
        "completed": True,
        "reward": 0.25,
        "rollouts_in": 12,
        "rollouts_out": 4,
        "external_peers_trained_on": ("a",),
        "accepted_peers": ("a",),
        "rejected": {},
        "opened_ms": 0,
        "finished_ms": 1,
    }
    fields.update(changes)
    return RoundRecord(**fields)


def test_round_line_and_rounds_jsonl_carry_the_evaluation(tmp_path: Path) -> None:
    result = {
        "round": 7,
        "step": 8,
        "accuracy": 0.3125,
        "reward": 0.42,
        "accuracy_change": 0.05,
        "per_task": {"basic_arithmetic": {"accuracy": 0.3125, "reward": 0.42, "n": 32}},
        "samples": [{"task": "basic_arithmetic", "completion": "<answer>4</answer>"}],
        "seconds": 2.5,
        "questions": 32,
    }
    lines: list[str] = []
    log = RoundLog(tmp_path / "rounds.jsonl", "me", tuple, lines.append)  # alone: round lines only
    log(_record(eval=result))
    log(_record(round=8, eval_deferred={"round": 8, "needed_s": 3.1, "left_s": 1.2}))
    log(_record(round=9))
    assert lines[0].endswith("| rejected 0 | eval acc 0.312 (+0.050) reward 0.420")
    assert lines[1].endswith("| rejected 0 | eval deferred: 3.1 s needed, 1.2 s left")
    assert lines[2].endswith("| rejected 0")
    saved = [json.loads(text) for text in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert saved[0]["eval"] == result and saved[0]["eval_deferred"] is None
    assert saved[1]["eval"] is None and saved[1]["eval_deferred"]["needed_s"] == 3.1
    assert saved[2]["eval"] is None


def _node_configs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> tuple[Any, Any]:
    """Run `swarmp2p node ARGS` with run_node replaced: the configs it would have run with."""
    import swarmp2p.node
    from swarmp2p.cli import app

    for name in list(__import__("os").environ):
        if name.startswith("SWARMP2P_"):
            monkeypatch.delenv(name)
    captured: list[Any] = []

    async def fake_run_node(node_config: Any, trainer_config: Any, **_: Any) -> None:
        captured.append((node_config, trainer_config))

    monkeypatch.setattr(swarmp2p.node, "run_node", fake_run_node)
    done = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path / "data"), *args])
    assert done.exit_code == 0, done.output
    return captured[0]


def test_node_eval_flags_map_onto_the_trainer_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, trainer = _node_configs(monkeypatch, tmp_path)
    defaults = TrainerConfig()
    assert trainer.eval_every == NODE_TRAINER_DEFAULTS["eval_every"] == 5  # the node's own default
    assert trainer.lr_decay_steps == 60 and defaults.lr_decay_steps == 0  # nodes anneal, train sets its own
    assert trainer.eval_before_train is defaults.eval_before_train
    assert trainer.eval_questions == defaults.eval_questions
    assert eval_settings(trainer) == EvalSettings(
        every=5, before_train=True, questions=defaults.eval_questions * len(trainer.tasks), sliced=True
    )

    _, trainer = _node_configs(
        monkeypatch,
        tmp_path,
        "--eval-every",
        "3",
        "--no-eval-before-train",
        "--eval-questions",
        "7",
        "--eval-generations-to-log",
        "2",
    )
    assert (trainer.eval_every, trainer.eval_before_train) == (3, False)
    assert (trainer.eval_questions, trainer.eval_generations_to_log) == (7, 2)
    assert eval_settings(trainer).questions == 7 * len(trainer.tasks)

    # The config file beats the node's default (0: never), and a flag beats the file.
    config = tmp_path / "node.toml"
    config.write_text("[trainer]\neval_every = 0\neval_questions = 4\n")
    _, trainer = _node_configs(monkeypatch, tmp_path, "--config", str(config))
    assert (trainer.eval_every, trainer.eval_questions) == (0, 4)
    _, trainer = _node_configs(monkeypatch, tmp_path, "--config", str(config), "--eval-every", "2")
    assert trainer.eval_every == 2


def test_a_bad_eval_flag_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from swarmp2p.cli import app

    done = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path), "--eval-questions", "0"])
    assert done.exit_code == 2
    assert "eval_questions" in done.output and "--eval-questions" in done.output


def test_command_defaults_sit_between_class_defaults_and_the_file(tmp_path: Path) -> None:
    registry = ConfigRegistry()

    def load(**kwargs: Any) -> TrainerConfig:
        return load_config(TrainerConfig, section="trainer", registry=registry, **kwargs)

    assert load(env={}).eval_every == TrainerConfig().eval_every
    assert load(env={}, defaults={"eval_every": 5}).eval_every == 5
    path = tmp_path / "c.toml"
    path.write_text("[trainer]\neval_every = 2\n")
    assert load(file=path, env={}, defaults={"eval_every": 5}).eval_every == 2
    assert load(env={"SWARMP2P_EVAL_EVERY": "9"}, defaults={"eval_every": 5}).eval_every == 9
    with pytest.raises(ConfigError, match="no_such_field"):
        load(env={}, defaults={"no_such_field": 1})


def test_the_node_takes_a_remembered_start_point_and_otherwise_says_it_evaluates_while_playing() -> None:
    from swarmp2p.node_policy import eval_settings, start_point

    lines: list[str] = []

    class Policy:
        stored: dict[str, Any] | None = None

        def evaluate(self) -> dict[str, Any]:
            raise AssertionError("the node never evaluates whole before joining")

        def remembered_evaluation(self) -> dict[str, Any] | None:
            return self.stored

    async def before(settings: EvalSettings, policy: Policy) -> Any:
        return await start_point(policy, settings, lines.append)

    assert trio.run(before, EvalSettings(every=5, questions=8), Policy()) is None
    assert lines == [
        "held-out evaluation: up to 8 questions, answered a batch at a time in the worker's spare "
        "moments while the node plays (the start point when it completes)"
    ]
    remembering = Policy()
    remembering.stored = {"step": 0, "accuracy": 0.25, "remembered": True}
    result = trio.run(before, EvalSettings(every=5, questions=8), remembering)
    assert result is not None and result[0]["accuracy"] == 0.25 and len(lines) == 1
    assert trio.run(before, EvalSettings(every=5, before_train=False), remembering) is None
    assert trio.run(before, EvalSettings(every=0), remembering) is None
    # The node's schedule is the sliced one.
    assert eval_settings(TrainerConfig(tasks=("leg_counting",), eval_every=5)).sliced is True


def test_a_probe_needs_a_window_worth_trying() -> None:
    from collections import Counter

    counters: Counter[str] = Counter()
    schedule = HeldOutEvaluation(EvalSettings(every=1, before_train=False, probe_after=3), counters)
    schedule.estimate_s = 60.0  # an outlier: by it nothing ever fits
    calls: list[str] = []

    class Quick:
        cancellable = False  # PolicyPort: only the cancel scope stops it

        def evaluate(self) -> dict[str, Any]:
            calls.append("evaluate")
            return {"step": 1, "accuracy": 0.5, "reward": 0.5, "seconds": 0.1}

    async def offload(fn, *args):  # type: ignore[no-untyped-def]
        return fn(*args)

    async def after(round_number: int, left_ms: int) -> Any:
        return await schedule.after_round(Quick(), offload, lambda: 0, round_number, left_ms, 1.0, 4)

    for r in range(3):
        assert trio.run(after, r, 10_000)[1]["needed_s"] == 75.5  # deferred 3 times in a row
    assert trio.run(after, 3, 2_400)[1] is not None and calls == []  # 1.9 s to try in: not a probe
    result, deferral = trio.run(after, 4, 3_000)  # 2.5 s: the probe runs and finishes
    assert calls == ["evaluate"] and deferral is None and result["accuracy"] == 0.5
    assert schedule.estimate_s == pytest.approx(0.1)


def test_the_peer_does_not_repeat_an_evaluation_before_training_the_node_already_tried() -> None:
    # `swarmp2p node` tries it before joining (and says when it fails): the Peer must not try it
    # again after joining, where it would cost round time.
    settings = EvalSettings(every=2, before_train=True, questions=1)
    swarm = Swarm(1, settings, SimPolicyParams(eval_questions=1))
    swarm.peers[0].evaluation.tried_before_train = True
    swarm.run(rounds=2)
    # No result before training: the first one comes after round 0 (still due since none ran).
    assert [e["round"] for e in swarm.statuses[0]["eval_history"]] == [0]


def test_a_config_file_can_keep_the_node_lr_constant(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text("[trainer]\nlr_decay_steps = 0\n")
    _, trainer = _node_configs(monkeypatch, tmp_path, "--config", str(config))
    assert trainer.lr_decay_steps == 0
