"""The sharing experiment (`swarmp2p experiment sharing`): does training on other peers' rollouts
help, at the same number of rollouts per update?

Every configuration (an `Arm`) runs the same simulated swarm (simulator/runner.py: the node's
round loop, in-memory network, virtual clock) once per seed, with the real trainer
(simulator/trainer_policy.py) or the cheap simulated learner (simulator/policy.py). What differs
between arms is only how each peer picks its training groups (protocol/sampling.py):

- `L/E` splits: L groups of the peer's own + E groups from other peers' verified batches,
  L + E the same in every split, zero-advantage groups dropped, a short side topped up from the
  other (`SamplingRule.fill`; an L/0 peer never takes external groups). Every peer generates
  `questions_per_round` questions of G completions per round whatever its split, so every arm
  spends the same generation compute and every update sees the same number of groups.
- `verified-only` / `unverified`: the middle split with `forgers` peers that claim inverted
  rewards. A Peer already accepts only external batches that pass re-scoring, so
  `verified-only` is the default behaviour under attack, and `unverified` switches the
  re-scoring off (PeerSettings.verify_rewards) to measure what it is worth.
- `adaptive`, `filtered`: the middle split under protocol.sampling's adaptive split and
  filtered-peer rules (documented there).
- `ratio-one`: the middle split with the trainer's off-policy correction off
  (`behaviour_correction = "none"`): external rollouts trained on as if the peer had sampled them,
  against the default truncated importance sampling (trainer/grpo.py).

Measured per honest peer: the mean reward of its own completions every round (the training
reward; summed over peers and rounds it is the table's cumulative reward), and the held-out
accuracy (heldout.py through the Peer: before training, every `eval_every` rounds, and at the
end). The trainer spy (`_Spy`) counts the groups and completions every train() call received.

Settings (`setting`, `--setting`): the swarm the arms run in, to say when sharing pays:
- `identical`: every peer the same model and task mix (SAPO's setup);
- `specialised`: each peer's own questions come from one task of the list
  (protocol.questions.specialty); every peer is evaluated on all tasks;
- `capability-gap`: half the peers a larger, better-trained model (`hetero`);
- `sparse`: correctness reward only (format reward 0): most of a peer's own groups have no
  reward spread, so its own rollouts carry little signal;
- `compute-matched`: an arm that takes external groups generates fewer questions of its own
  (`questions_per_round` x L / (L + E)) and trains on the same number: held-out accuracy against
  generation CPU-seconds.
Every row reports the held-out gain from round 0 with a 95% interval over seeds and questions
(trainer/intervals.py), and every arm is compared with the first split on the same seeds (paired).

Reproducible: a job (arm, seed) is a pure function of its settings; jobs run in worker
processes (`jobs`) in any order and give the same numbers as run one after another.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import multiprocessing
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from protocol.messages import QuestionGroup
from trainer.intervals import Interval, grid_interval, paired_interval
from trainer.percentile import percentile

PUBLISHED = {
    "source": "SAPO (Gensyn, arXiv:2509.08721): 8 agents, Qwen2.5 0.5B, reasoning-gym, "
    "8 completions per question, the same number of rollouts per update",
    "cumulative_reward": {"8/0": 561.79, "6/2": 854.43, "4/4": 1093.31, "2/6": 945.87},
}
VARIANTS: tuple[str, ...] = ("verified-only", "unverified", "adaptive", "filtered", "ratio-one")
DEFAULT_VARIANTS: tuple[str, ...] = ("verified-only", "unverified", "adaptive", "filtered")
SETTINGS: tuple[str, ...] = ("identical", "specialised", "capability-gap", "sparse", "compute-matched")
POLICIES = ("trainer", "sim")


class ExperimentError(ValueError):
    """A bad experiment setting (one line)."""


@attrs.frozen
class Arm:
    """One configuration: a row of the table."""

    name: str
    n_local: int
    n_external: int
    sampling: str = "fixed"
    verify: bool = True
    forgers: int = 0
    baseline: str = ""  # the row this one is compared with ("" = the first split)
    questions_per_round: int = 0  # 0 = the experiment's; compute-matched arms generate fewer
    trainer: tuple[tuple[str, Any], ...] = ()  # TrainerConfig overrides of this arm's peers


@attrs.frozen
class ExperimentSettings:
    peers: int = 8
    rounds: int = 15
    splits: tuple[tuple[int, int], ...] = ((8, 0), (6, 2), (4, 4), (2, 6))
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    seeds: tuple[int, ...] = (1, 2, 3)
    policy: str = "trainer"
    hetero: bool = False
    large: tuple[tuple[str, int], ...] = (
        ("tiny_hidden_size", 192),
        ("tiny_layers", 4),
        ("tiny_pretrain_steps", 1000),
    )
    """TrainerConfig overrides of the larger half of a `hetero` swarm (odd peer indices): 1.6M
    parameters pre-trained 1000 steps. On the current base (near-miss share 0.6) it is the better
    number_sequence solver (test 0.142 against 0.122) and earns more reward per round, but answers
    fewer of leg_counting's 8 test questions (0.375 against 0.562), so its test accuracy as the
    mean over tasks starts lower (0.259 against 0.343), over all questions a little higher (0.159
    against 0.155; docs/experiments.md). On the first base it was 0.40 against
    0.19 (a larger model pre-trained as long as the base, 400 steps, was weaker: 0.13 at hidden
    256)."""
    questions_per_round: int = 16
    group_size: int = 8
    eval_every: int = 5
    eval_questions: int = 100
    """Held-out questions per task (trainer); the simulated learner answers its own 16."""
    eval_split: str = "test"
    """The held-out split the trainer evaluates: `test`, because the table is a reported result
    (no setting was chosen on it); `validation` is the one settings were chosen on."""
    round_s: float = 30.0
    forgers: int = 2
    max_groups_per_peer: int = 2
    fetch_sample: int = 0
    """0: every peer fetches and verifies every batch; N: about N per round (large sim swarms)."""
    warmup_steps: int = -1
    """Supervised warm-up of the shared start: -1 = only for a raw (not pre-trained) tiny model."""
    trainer: tuple[tuple[str, Any], ...] = ()
    """TrainerConfig overrides for every peer (e.g. (("tasks", ("basic_arithmetic",)),)); the
    default is the trainer's own defaults: the model and tasks `swarmp2p train` uses."""
    jobs: int = 1
    setting: str = "identical"
    """The swarm the arms run in (SETTINGS; module docstring)."""
    models_dir: str = ""
    """Where the tiny model builds are cached ("" = the trainer's default, .swarmp2p/models)."""

    def __attrs_post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ExperimentError(f"setting must be one of {', '.join(SETTINGS)}, got {self.setting!r}")
        if self.policy not in POLICIES:
            raise ExperimentError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not self.splits:
            raise ExperimentError("at least one split is needed")
        if self.eval_split not in ("validation", "test"):
            raise ExperimentError(f"eval split must be validation or test, got {self.eval_split!r}")
        budgets = {local + external for local, external in self.splits}
        if len(budgets) != 1:
            raise ExperimentError(
                f"every split must train on the same number of groups (L + E), got "
                f"{', '.join(f'{a}/{b}' for a, b in self.splits)}"
            )
        unknown = [name for name in self.variants if name not in VARIANTS]
        if unknown:
            raise ExperimentError(f"unknown variant {unknown[0]!r} (known: {', '.join(VARIANTS)})")
        if self.variants and self.budget < 2:
            raise ExperimentError("the variants need L + E >= 2 (they run the middle split)")
        if self.peers < 2 or self.rounds < 1 or not self.seeds:
            raise ExperimentError("need at least 2 peers, 1 round and 1 seed")
        if self.forgers >= self.peers - 1 and any(
            v in ("verified-only", "unverified") for v in self.variants
        ):
            raise ExperimentError(f"{self.forgers} forgers leave fewer than 2 honest peers")
        if self.setting == "specialised" and self.policy == "trainer" and len(self.trainer_tasks()) < 2:
            raise ExperimentError("the specialised setting needs two or more tasks (--tasks a,b)")
        if self.setting == "sparse" and self.policy != "trainer":
            raise ExperimentError(
                "the sparse setting needs the real trainer (the simulated learner has no format reward)"
            )
        if self.swarm_hetero and self.policy != "trainer":
            raise ExperimentError("--hetero and capability-gap need the real trainer (two model sizes)")
        if self.eval_every < 0 or self.questions_per_round < 1 or self.group_size < 2:
            raise ExperimentError("eval_every >= 0, questions_per_round >= 1, group_size >= 2")

    @property
    def budget(self) -> int:
        local, external = self.splits[0]
        return local + external

    def arms(self) -> list[Arm]:
        arms = [
            Arm(f"{local}/{external}", local, external, questions_per_round=self._own_questions(local))
            for local, external in self.splits
        ]
        half = self.budget // 2
        middle = f"{self.budget - half}/{half}"
        for variant in self.variants:
            arm = Arm(variant, self.budget - half, half, baseline=middle)
            if variant in ("verified-only", "unverified"):
                arm = attrs.evolve(arm, verify=variant == "verified-only", forgers=self.forgers)
            elif variant == "ratio-one":
                # external rollouts trained on as if this peer had sampled them (no truncated
                # importance sampling): the off-policy correction measured against its absence
                arm = attrs.evolve(arm, trainer=(("behaviour_correction", "none"),))
            elif variant in ("adaptive", "filtered"):
                arm = attrs.evolve(arm, sampling=variant)
            arms.append(arm)
        return arms

    def _own_questions(self, local: int) -> int:
        """Questions a peer of an L/E arm generates per round: all of them, except in the
        compute-matched setting, where generation shrinks with the local share (at least 1)."""
        if self.setting != "compute-matched":
            return 0
        return max(1, round(self.questions_per_round * local / self.budget))

    @property
    def swarm_hetero(self) -> bool:
        return self.hetero or self.setting == "capability-gap"

    def trainer_tasks(self) -> tuple[str, ...]:
        from trainer.config import DEFAULT_TASKS

        return tuple(dict(self.trainer).get("tasks", DEFAULT_TASKS))

    def trainer_overrides(self) -> dict[str, Any]:
        overrides = dict(self.trainer)
        if self.setting == "sparse":
            overrides["format_reward"] = 0.0
        return overrides

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["splits"] = [f"{local}/{external}" for local, external in self.splits]
        data["large"] = dict(self.large)
        data["trainer"] = dict(self.trainer)
        return data


def parse_splits(text: str) -> tuple[tuple[int, int], ...]:
    splits = []
    for part in text.split(","):
        part = part.strip()
        try:
            local, external = (int(x) for x in part.split("/"))
        except ValueError:
            raise ExperimentError(f"a split is L/E (e.g. 4/4), got {part!r}") from None
        if local < 0 or external < 0 or local + external == 0:
            raise ExperimentError(f"a split needs L, E >= 0 and L + E > 0, got {part!r}")
        splits.append((local, external))
    return tuple(splits)


def parse_variants(text: str) -> tuple[str, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


# ---- one job: an arm and a seed ----------------------------------------------------------


class _Spy:
    """Between the Peer and the policy: records what every train() call received and every
    evaluation's result, and lets the experiment evaluate the peer once more at the end."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        # (groups given, completions, groups the trainer used) per train() call: a trainer drops
        # held-out and zero-advantage groups, so what it used is read from its own metrics
        self.updates: list[tuple[int, int, int]] = []
        self.evals: list[dict[str, Any]] = []  # (updates seen, result)
        self.generate_cpu_s = 0.0  # this thread's CPU time in generate(): the compute-matched x
        self.corrected_groups = 0  # groups the trainer weighted by their behaviour log-probs

    def generate(self, questions: Sequence[Any]) -> list[QuestionGroup]:
        started = time.thread_time()
        try:
            return self.inner.generate(questions)
        finally:
            self.generate_cpu_s += time.thread_time() - started

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        metrics = self.inner.train(groups)
        used = int(metrics.get("groups_used", len(groups)))
        self.corrected_groups += int(metrics.get("behaviour_groups", 0))
        self.updates.append((len(groups), sum(len(group.completions) for group in groups), used))
        return metrics

    def save(self) -> None:
        self.inner.save()

    def load(self) -> bool:
        return self.inner.load()

    cancellable = False
    """PolicyPort: a simulated learner's wrapper: a cancel scope ends its virtual compute time."""

    def cancel(self) -> None:
        pass

    def reset_cancel(self) -> None:
        pass

    def evaluate(self) -> dict[str, Any]:
        result = self.inner.evaluate()
        self.evals.append({"updates": len(self.updates), **_eval_summary(result)})
        return result


def _eval_summary(result: dict[str, Any]) -> dict[str, Any]:
    summary = {
        "accuracy": float(result["accuracy"]),
        "reward": float(result["reward"]),
        "per_task": {task: float(v["accuracy"]) for task, v in sorted(result.get("per_task", {}).items())},
    }
    if result.get("per_question"):  # the real trainer's: what gains are paired on
        summary["per_question"] = [float(x) for x in result["per_question"]]
    return summary


def _solved_threshold(format_reward: float) -> float:
    """Between a wrong answer's best reward (the format reward) and a right one's (1.0)."""
    return (1.0 + format_reward) / 2


def trainer_config(settings: ExperimentSettings) -> Any:
    """The TrainerConfig every peer starts from: the trainer's defaults (model, tasks, sizes,
    format reward) with the experiment's evaluation size."""
    from trainer.config import TrainerConfig

    return TrainerConfig(
        eval_questions=settings.eval_questions,
        eval_every=settings.eval_every,
        eval_split=settings.eval_split,
        **settings.trainer_overrides(),
    )


def run_job(
    settings: ExperimentSettings,
    arm: Arm,
    seed: int,
    work_dir: Path,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run one arm with one seed; returns its JSON-able per-peer record."""
    from protocol.sampling import SamplingRule
    from simulator.runner import run_simulation
    from simulator.scenario import ByzantineSpec, Scenario
    from swarmp2p.heldout import EvalSettings

    started, cpu_started = time.perf_counter(), time.process_time()
    questions_per_round = arm.questions_per_round or settings.questions_per_round
    scenario = Scenario(
        name=f"sharing-{arm.name}",
        peers=settings.peers,
        rounds=settings.rounds,
        seed=seed,
        round_s=settings.round_s,
        questions_per_round=questions_per_round,
        n_local=arm.n_local,
        n_external=arm.n_external,
        max_groups_per_peer=settings.max_groups_per_peer,
        group_size=settings.group_size,
        fetch_sample=settings.fetch_sample,
        policy=settings.policy,
        byzantine=ByzantineSpec(fraction=arm.forgers / settings.peers, kinds=("forge",)),
    )
    spies: dict[str, _Spy] = {}

    def wrap(plan: Any, policy: Any) -> Any:
        spy = spies[plan.peer_id] = _Spy(policy)
        return spy

    kwargs: dict[str, Any] = {}
    if settings.policy == "trainer":
        from simulator.trainer_policy import TrainerSimSettings

        config = attrs.evolve(trainer_config(settings), **dict(arm.trainer))
        format_reward = config.format_reward
        kwargs = {
            "work_dir": work_dir,
            "trainer_config": config,
            "trainer_settings": TrainerSimSettings(
                warmup_steps=settings.warmup_steps,
                checkpoints=False,
                forge="invert",
                models_dir=str(models_dir(settings)),
            ),
            "trainer_large": dict(settings.large) if settings.swarm_hetero else None,
        }
        questions = settings.eval_questions * len(config.tasks)
    else:
        from simulator.policy import SimPolicyParams
        from simulator.registry import DEFAULT_TASKS, FORMAT_REWARD

        format_reward = FORMAT_REWARD
        questions = SimPolicyParams().eval_questions * len(DEFAULT_TASKS)
    rule = SamplingRule(kind=arm.sampling, fill=True, solved=_solved_threshold(format_reward))
    overrides = {
        "sampling": rule,
        "verify_rewards": arm.verify,
        "specialised": settings.setting == "specialised",
        "evaluation": EvalSettings(every=settings.eval_every, before_train=True, questions=questions),
    }
    result = run_simulation(
        scenario,
        on_round=on_round,
        peer_overrides=overrides,
        wrap_policy=wrap,
        **kwargs,
    )
    last_round = settings.rounds - 1
    honest_ids = {plan.peer_id for plan in result.plans if plan.honest}
    peers = []
    for plan in result.plans:
        if not plan.honest:
            continue
        records = {record.round: record for record in result.records[plan.peer_id] if record.completed}
        spy = spies[plan.peer_id]
        evals = _evals_by_round(spy, records)
        if settings.eval_every > 0 and (not evals or evals[-1]["round"] < last_round):
            # The end point: after the last round, whatever the schedule left out.
            summary = _eval_summary(spy.inner.evaluate())
            evals.append({"round": last_round, **summary})
        peers.append(
            {
                "index": plan.index,
                "peer_id": plan.peer_id,
                "size": result.peer_sizes.get(plan.peer_id, "base"),
                "rewards": [
                    None if r not in records or records[r].reward is None else records[r].reward
                    for r in range(settings.rounds)
                ],
                "trained_local": [
                    records[r].trained_local if r in records else 0 for r in range(settings.rounds)
                ],
                "trained_external": [
                    records[r].trained_external if r in records else 0 for r in range(settings.rounds)
                ],
                "updates": [list(update) for update in spy.updates],
                "evals": evals,
                "generate_cpu_s": spy.generate_cpu_s,
                "corrected_groups": spy.corrected_groups,
            }
        )
    return {
        "arm": arm.name,
        "seed": seed,
        "peers": peers,
        "forgers": [plan.index for plan in result.plans if not plan.honest],
        # Groups with forged rewards that honest peers trained on (the runner's oracle re-scores
        # every trained group; the forgers' own training on their claims is not counted).
        "invalid_trained": sum(1 for pid, _ in result.invalid_trained if pid in honest_ids),
        "rejections": dict(sorted(result.rejections.items())),
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu_started,
    }


def _evals_by_round(spy: _Spy, records: dict[int, Any]) -> list[dict[str, Any]]:
    """The peer's evaluations: round -1 is before training (the Peer's first, before any
    update), then the rounds whose record carries one (heldout.py)."""
    evals = []
    if spy.evals and spy.evals[0]["updates"] == 0:
        evals.append({"round": -1, **{k: v for k, v in spy.evals[0].items() if k != "updates"}})
    for round_number in sorted(records):
        result = records[round_number].eval
        if result:
            evals.append({"round": round_number, **_eval_summary(dict(result))})
    return evals


def models_dir(settings: ExperimentSettings) -> Path:
    if settings.models_dir:
        return Path(settings.models_dir)
    from trainer.config import user_model_cache

    return Path(user_model_cache())  # the same build `swarmp2p train` and `node` use


def prepare_models(settings: ExperimentSettings) -> None:
    """Build the tiny model(s) once, before the jobs start (they would otherwise race to)."""
    if settings.policy != "trainer":
        return
    from trainer.model import model_folder

    base = trainer_config(settings)
    configs = [base]
    if settings.swarm_hetero:
        configs.append(attrs.evolve(base, **dict(settings.large)))
    for config in configs:
        model_folder(attrs.evolve(config, data_dir=str(models_dir(settings).parent)))


def _job_worker(
    settings: ExperimentSettings, arm: Arm, seed: int, work_dir: str, queue: Any
) -> dict[str, Any]:
    def on_round(round_number: int) -> None:
        queue.put((arm.name, seed, round_number))

    return run_job(settings, arm, seed, Path(work_dir), on_round)


def run_experiment(
    settings: ExperimentSettings,
    out: Path,
    *,
    on_round: Callable[[str, int, int], None] | None = None,
    on_job: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every (arm, seed) job, `settings.jobs` at a time; returns the job records in arm and
    seed order. `on_round(arm, seed, round)` as each simulated round ends, `on_job(record)` as
    each job ends."""
    out.mkdir(parents=True, exist_ok=True)
    prepare_models(settings)
    jobs = [(arm, seed) for arm in settings.arms() for seed in settings.seeds]
    work = out / "work"
    results: dict[tuple[str, int], dict[str, Any]] = {}

    def done(record: dict[str, Any]) -> None:
        results[(record["arm"], record["seed"])] = record
        if on_job is not None:
            on_job(record)

    if settings.jobs <= 1:
        for arm, seed in jobs:
            callback = None if on_round is None else (lambda r, a=arm.name, s=seed: on_round(a, s, r))
            done(run_job(settings, arm, seed, work / f"{_slug(arm.name)}-s{seed}", callback))
    else:
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            queue = manager.Queue()
            with concurrent.futures.ProcessPoolExecutor(
                max_workers=settings.jobs, mp_context=context
            ) as pool:
                futures = [
                    pool.submit(
                        _job_worker, settings, arm, seed, str(work / f"{_slug(arm.name)}-s{seed}"), queue
                    )
                    for arm, seed in jobs
                ]
                pending = set(futures)
                while pending:
                    finished, pending = concurrent.futures.wait(pending, timeout=0.2)
                    _drain(queue, on_round)
                    for future in finished:
                        done(future.result())
                _drain(queue, on_round)
    shutil.rmtree(work, ignore_errors=True)
    return [results[(arm.name, seed)] for arm, seed in jobs]


def _drain(queue: Any, on_round: Callable[[str, int, int], None] | None) -> None:
    import queue as queue_module

    while True:
        try:
            event = queue.get_nowait()
        except queue_module.Empty:
            return
        if on_round is not None:
            on_round(*event)


def _slug(name: str) -> str:
    return name.replace("/", "-")


# ---- aggregation -------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def _job_numbers(
    job: dict[str, Any], size: str | None = None, settings: ExperimentSettings | None = None
) -> dict[str, Any]:
    peers = [p for p in job["peers"] if size is None or p["size"] == size]
    cumulative = math.fsum(r for p in peers for r in p["rewards"] if r is not None)
    finals = [p["evals"][-1]["accuracy"] for p in peers if p["evals"]]
    starts = [p["evals"][0]["accuracy"] for p in peers if p["evals"] and p["evals"][0]["round"] == -1]
    return {
        "question_gains": _question_gains(peers),
        "off_specialty_gains": _off_specialty_gains(peers, settings)
        if settings is not None and settings.setting == "specialised"
        else None,
        "generate_cpu_s_per_peer": statistics.fmean(p.get("generate_cpu_s", 0.0) for p in peers)
        if peers
        else None,
        "cumulative_reward": cumulative,
        "cumulative_reward_per_peer": cumulative / len(peers) if peers else None,
        "final_accuracy": statistics.fmean(finals) if finals else None,
        "start_accuracy": statistics.fmean(starts) if starts else None,
        "honest_peers": len(peers),
    }


def _peer_question_gains(peer: dict[str, Any]) -> list[float] | None:
    """One peer's per-question gain, last evaluation minus the one before training; None when it
    has no start evaluation or no per-question results (the simulated learner)."""
    evals = peer["evals"]
    if len(evals) < 2 or evals[0]["round"] != -1:
        return None
    first, last = evals[0].get("per_question"), evals[-1].get("per_question")
    if not first or not last or len(first) != len(last):
        return None
    return [after - before for before, after in zip(first, last, strict=True)]


def _off_specialty_gains(peers: Sequence[dict[str, Any]], settings: ExperimentSettings) -> list[float] | None:
    """Specialised swarms: per held-out question, the mean gain of the peers whose own questions
    come from OTHER tasks (what a peer learned about a task it never answers itself). The held-out
    set lists each task's `eval_questions` questions in task order; None when it does not (a task
    with fewer distinct held-out questions), or when a question has no such peer."""
    from protocol.questions import specialty

    tasks = settings.trainer_tasks()
    size = settings.eval_questions
    columns: list[list[float]] = [[] for _ in range(size * len(tasks))]
    for peer in peers:
        gains = _peer_question_gains(peer)
        if gains is None or len(gains) != len(columns):
            return None
        own = tasks.index(specialty(tasks, peer["peer_id"]))
        for position, gain in enumerate(gains):
            if position // size != own:
                columns[position].append(gain)
    if any(not column for column in columns):
        return None
    return [statistics.fmean(column) for column in columns]


def _question_gains(peers: Sequence[dict[str, Any]]) -> list[float] | None:
    """Per held-out question, the mean over `peers` of (last evaluation - the one before
    training): what a row's gain interval resamples. None when a peer lacks per-question results
    (the simulated learner) or the start evaluation."""
    rows = [_peer_question_gains(peer) for peer in peers]
    if not rows or any(row is None for row in rows) or len({len(row) for row in rows}) != 1:
        return None
    return [statistics.fmean(column) for column in zip(*rows, strict=True)]


def _gain_interval(numbers: Sequence[dict[str, Any]], key: str = "question_gains") -> dict[str, float] | None:
    rows = [n[key] for n in numbers]
    if not rows or any(row is None for row in rows) or len({len(row) for row in rows}) != 1:
        return None
    return grid_interval(rows).as_dict()


def _paired_against(
    ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]
) -> dict[str, dict[str, float] | None]:
    """This arm minus `theirs` on the same seeds (lists in seed order): the held-out gain's
    difference (two-way bootstrap over seeds and questions) and the cumulative reward per peer's
    (Student's t over seeds)."""
    pairs = list(zip(ours, theirs, strict=True))

    def difference(key: str) -> dict[str, float] | None:
        if not pairs or not all(a[key] and b[key] for a, b in pairs):
            return None
        diffs = [[x - y for x, y in zip(a[key], b[key], strict=True)] for a, b in pairs]
        return grid_interval(diffs).as_dict()

    rewards = [
        a["cumulative_reward_per_peer"] - b["cumulative_reward_per_peer"]
        for a, b in pairs
        if a["cumulative_reward_per_peer"] is not None and b["cumulative_reward_per_peer"] is not None
    ]
    reward = paired_interval(rewards).as_dict() if len(rewards) >= 2 else None
    return {
        "gain_difference": difference("question_gains"),
        "off_specialty_difference": difference("off_specialty_gains"),
        "reward_difference": reward,
    }


def summarize(settings: ExperimentSettings, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The table (per arm: numbers over seeds) and the curves (per arm and round)."""
    arms = settings.arms()
    rows = []
    sizes = ["base", "large"] if settings.swarm_hetero else [None]
    for arm in arms:
        mine = [job for job in jobs if job["arm"] == arm.name]
        for size in sizes:
            numbers = [_job_numbers(job, size, settings) for job in mine]
            updates = [
                u for job in mine for p in job["peers"] if size in (None, p["size"]) for u in p["updates"]
            ]
            local = [
                x
                for job in mine
                for p in job["peers"]
                if size in (None, p["size"])
                for x in p["trained_local"]
            ]
            external = [
                x
                for job in mine
                for p in job["peers"]
                if size in (None, p["size"])
                for x in p["trained_external"]
            ]
            row = {
                "configuration": arm.name,
                "size": size or "all",
                "n_local": arm.n_local,
                "n_external": arm.n_external,
                "sampling": arm.sampling,
                "verify": arm.verify,
                "forgers": arm.forgers,
                "baseline": arm.baseline or f"{settings.splits[0][0]}/{settings.splits[0][1]}",
                "honest_peers": numbers[0]["honest_peers"] if numbers else 0,
                "seeds": [job["seed"] for job in mine],
                "cumulative_reward": _spread([n["cumulative_reward"] for n in numbers]),
                "cumulative_reward_per_peer": _spread(
                    [
                        n["cumulative_reward_per_peer"]
                        for n in numbers
                        if n["cumulative_reward_per_peer"] is not None
                    ]
                ),
                "final_accuracy": _spread(
                    [n["final_accuracy"] for n in numbers if n["final_accuracy"] is not None]
                ),
                "start_accuracy": _spread(
                    [n["start_accuracy"] for n in numbers if n["start_accuracy"] is not None]
                ),
                "groups_per_update": _spread([float(u[0]) for u in updates]),
                "completions_per_update": _spread([float(u[1]) for u in updates]),
                "groups_used_per_update": _spread([float(u[2]) for u in updates if len(u) > 2]),
                "heldout_gain": _gain_interval(numbers),
                "off_specialty_gain": _gain_interval(numbers, "off_specialty_gains"),
                "generate_cpu_s_per_peer": _spread(
                    [
                        n["generate_cpu_s_per_peer"]
                        for n in numbers
                        if n["generate_cpu_s_per_peer"] is not None
                    ]
                ),
                "questions_per_round": arm.questions_per_round or settings.questions_per_round,
                "_numbers": numbers,
                "trained_local_mean": statistics.fmean(local) if local else None,
                "trained_external_mean": statistics.fmean(external) if external else None,
                "invalid_trained": sum(job["invalid_trained"] for job in mine),
                "wall_s": sum(job["wall_s"] for job in mine),
            }
            rows.append(row)
    by_key = {(row["configuration"], row["size"]): row for row in rows}
    for row in rows:
        base = by_key.get((row["baseline"], row["size"]))
        ours = row["cumulative_reward_per_peer"]["mean"]
        theirs = base["cumulative_reward_per_peer"]["mean"] if base else None
        row["ratio_to_baseline"] = ours / theirs if ours is not None and theirs else None
        first = by_key.get((f"{settings.splits[0][0]}/{settings.splits[0][1]}", row["size"]))
        theirs = first["cumulative_reward_per_peer"]["mean"] if first else None
        row["ratio_to_first_split"] = ours / theirs if ours is not None and theirs else None
        row["vs_first_split"] = (
            _paired_against(row["_numbers"], first["_numbers"])
            if first is not None and first is not row and first["seeds"] == row["seeds"]
            else None
        )
        row["vs_baseline"] = (
            _paired_against(row["_numbers"], base["_numbers"])
            if base is not None and base is not first and base is not row and base["seeds"] == row["seeds"]
            else None
        )
    for row in rows:
        del row["_numbers"]
    return {"rows": rows, "curves": _curves(settings, jobs)}


def _band(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "mean": statistics.fmean(values),
        "p10": percentile(values, 0.1),
        "p90": percentile(values, 0.9),
        "min": min(values),
        "max": max(values),
    }


def _curves(settings: ExperimentSettings, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm (and per model size in a hetero swarm: keys "arm [size]"): reward per round and
    held-out accuracy per evaluation point, over every (seed, honest peer): mean, p10-p90,
    min-max. Accuracy's x is rounds trained (0 = start)."""
    curves: dict[str, Any] = {}
    sizes = ("base", "large") if settings.swarm_hetero else (None,)
    for arm in settings.arms():
        mine = [job for job in jobs if job["arm"] == arm.name]
        for size in sizes:
            peers = [p for job in mine for p in job["peers"] if size in (None, p["size"])]
            reward = []
            for round_number in range(settings.rounds):
                values = [p["rewards"][round_number] for p in peers if p["rewards"][round_number] is not None]
                reward.append({"round": round_number, **(_band(values) or {})})
            points: dict[int, list[float]] = {}
            for peer in peers:
                for entry in peer["evals"]:
                    points.setdefault(entry["round"] + 1, []).append(entry["accuracy"])
            accuracy = [{"rounds_trained": x, **(_band(v) or {})} for x, v in sorted(points.items())]
            name = arm.name if size is None else f"{arm.name} [{size}]"
            curves[name] = {"arm": arm.name, "size": size or "all", "reward": reward, "accuracy": accuracy}
    return curves


# ---- output ------------------------------------------------------------------------------


def _fmt(spread: dict[str, Any], digits: int) -> str:
    if spread.get("mean") is None:
        return "–"
    text = f"{spread['mean']:.{digits}f} ± {spread['std']:.{digits}f}"
    return text + f" [{spread['min']:.{digits}f}–{spread['max']:.{digits}f}]"


def _interval_text(interval: dict[str, float] | None, digits: int = 3) -> str:
    return "–" if interval is None else Interval(**interval).text(digits)


def table_markdown(settings: ExperimentSettings, summary: dict[str, Any]) -> str:
    first = f"{settings.splits[0][0]}/{settings.splits[0][1]}"
    lines = [
        f"Sharing experiment: {settings.peers} peers ({settings.policy}), {settings.rounds} rounds, "
        f"seeds {', '.join(map(str, settings.seeds))}; {settings.questions_per_round} questions x "
        f"{settings.group_size} completions per peer and round; {settings.budget} groups per update.",
        f"Setting: {settings.setting}. "
        "Numbers are mean ± std [min–max] over seeds. Cumulative reward: the mean reward of each honest "
        "peer's own completions, summed over honest peers and rounds. Ratio: cumulative reward per peer "
        "against the baseline row's. Held-out gain: the honest peers' mean accuracy gain from before "
        "training to the end, with a 95% interval over seeds and questions; vs "
        f"{first}: this row minus {first} on the same seeds (gain: 95% interval over seeds and questions; "
        "cumulative reward per peer: Student's t over seeds). Groups used: what the trainer trained on "
        "(held-out and zero-advantage groups dropped). Generation: CPU seconds per peer in generate().",
        "",
        "| configuration | size | honest peers | cumulative reward | per peer | ratio to "
        f"{first} | vs baseline | held-out accuracy start → end | held-out gain [95%] "
        f"| gain vs {first} [95%] | reward per peer vs {first} [95%] | groups given / update [min–max] "
        "| groups used / update | local + external (mean) | questions / round | generation CPU s / peer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        ratio = row["ratio_to_first_split"]
        vs = row["ratio_to_baseline"] if row["baseline"] != first else None
        groups = row["groups_per_update"]
        groups_text = (
            "–"
            if groups["mean"] is None
            else f"{groups['mean']:.2f} [{groups['min']:.0f}–{groups['max']:.0f}]"
        )
        start = row["start_accuracy"]["mean"]
        versus = row.get("vs_first_split") or {}
        used = row["groups_used_per_update"]
        lines.append(
            "| "
            + " | ".join(
                [
                    row["configuration"],
                    row["size"],
                    str(row["honest_peers"]),
                    _fmt(row["cumulative_reward"], 2),
                    _fmt(row["cumulative_reward_per_peer"], 2),
                    "–" if ratio is None else f"{ratio:.3f}",
                    "–" if vs is None else f"{vs:.3f} (vs {row['baseline']})",
                    ("–" if start is None else f"{start:.3f} → ") + _fmt(row["final_accuracy"], 3),
                    _interval_text(row["heldout_gain"]),
                    _interval_text(versus.get("gain_difference")),
                    _interval_text(versus.get("reward_difference"), 2),
                    groups_text,
                    "–"
                    if used["mean"] is None
                    else f"{used['mean']:.2f} [{used['min']:.0f}–{used['max']:.0f}]",
                    "–"
                    if row["trained_local_mean"] is None
                    else f"{row['trained_local_mean']:.2f} + {row['trained_external_mean']:.2f}",
                    str(row["questions_per_round"]),
                    _fmt(row["generate_cpu_s_per_peer"], 1),
                ]
            )
            + " |"
        )
    variants = [row for row in summary["rows"] if row.get("vs_baseline")]
    if variants:
        lines.append("")
        lines.append(
            "Rows beyond the splits against the split they run on (same seeds; held-out gain: 95% interval "
            "over seeds and questions; reward per peer: Student's t): "
            + "; ".join(
                f"{row['configuration']} vs {row['baseline']}: gain "
                f"{_interval_text(row['vs_baseline']['gain_difference'])}, reward "
                f"{_interval_text(row['vs_baseline']['reward_difference'], 2)}"
                + (
                    f", off-specialty gain {_interval_text(row['vs_baseline']['off_specialty_difference'])}"
                    if row["vs_baseline"].get("off_specialty_difference")
                    else ""
                )
                for row in variants
            )
            + "."
        )
    if settings.setting == "specialised":
        lines.append("")
        lines.append(
            "Off-specialty gain (held-out questions of the tasks a peer never answers itself, 95% interval "
            "over seeds and questions): "
            + "; ".join(
                f"{row['configuration']} {_interval_text(row['off_specialty_gain'])}"
                + (
                    f" (vs {first}: {_interval_text(row['vs_first_split'].get('off_specialty_difference'))})"
                    if row.get("vs_first_split")
                    else ""
                )
                for row in summary["rows"]
            )
            + "."
        )
    forged = [row for row in summary["rows"] if row["forgers"]]
    if forged:
        lines.append("")
        lines.append(
            "Rows with forgers: "
            + "; ".join(
                f"{row['configuration']}: {row['forgers']} reward-inverting peers, "
                f"{row['invalid_trained']} forged groups trained on by honest peers (all seeds)"
                for row in forged
            )
            + "."
        )
    return "\n".join(lines) + "\n"


def write_outputs(
    settings: ExperimentSettings,
    jobs: list[dict[str, Any]],
    out: Path,
    command: str,
    elapsed_s: float | None = None,
) -> list[Path]:
    """table.md, table.json (+ the raw per-peer records in jobs.json), the plots, settings.json.
    `elapsed_s`: the whole experiment's wall time, kept in table.json with the jobs' own times."""
    summary = summarize(settings, jobs)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    table = out / "table.md"
    table.write_text(table_markdown(settings, summary))
    written.append(table)
    data = {"settings": settings.to_json(), "rows": summary["rows"], "curves": summary["curves"]}
    data["published"] = PUBLISHED
    data["timing"] = {
        "elapsed_s": elapsed_s,
        "jobs": settings.jobs,
        "job_wall_s": math.fsum(job["wall_s"] for job in jobs),
        "job_cpu_s": math.fsum(job.get("cpu_s", 0.0) for job in jobs),
    }
    (out / "table.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    written.append(out / "table.json")
    (out / "jobs.json").write_text(json.dumps(jobs, sort_keys=True) + "\n")
    written.append(out / "jobs.json")
    written.extend(write_plots(settings, summary, out))
    written.append(write_settings(settings, out, command))
    return written


def write_settings(settings: ExperimentSettings, out: Path, command: str) -> Path:
    """Everything needed to rerun: the settings, every seed, the trainer config, the command."""
    data: dict[str, Any] = {
        "command": command,
        "settings": settings.to_json(),
        "arms": [attrs.asdict(arm) for arm in settings.arms()],
        "seeds": list(settings.seeds),
    }
    if settings.policy == "trainer":
        # As every peer runs it: the simulator sets device, threads and G (TrainerSwarm).
        config = attrs.evolve(
            trainer_config(settings), device="cpu", threads=1, num_generations=settings.group_size
        )
        data["trainer_config"] = {k: v for k, v in attrs.asdict(config).items() if k != "data_dir"}
        if settings.swarm_hetero:
            data["trainer_config_large"] = dict(settings.large)
    try:
        import torch

        data["torch"] = torch.__version__
    except ImportError:  # pragma: no cover - the sim policy runs without torch
        pass
    path = out / "settings.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return path


def write_plots(settings: ExperimentSettings, summary: dict[str, Any], out: Path) -> list[Path]:
    """reward.png and accuracy.png: one line per configuration (mean over honest peers and
    seeds) with a p10-p90 band over (peer, seed). Left panel: the splits; right panel (when
    there are variants): each variant against the split it is compared with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curves = summary["curves"]
    arms = settings.arms()
    colors = dict(zip([arm.name for arm in arms], plt.get_cmap("tab10").colors, strict=False))
    splits = [arm.name for arm in arms if not arm.baseline]
    variants = [arm.name for arm in arms if arm.baseline]
    panels = [("L/E splits", splits)]
    if variants:
        baselines = sorted({arm.baseline for arm in arms if arm.baseline})
        panels.append((f"beyond the published setup (vs {', '.join(baselines)})", baselines + variants))
    written = []
    for key, name, xlabel, ylabel, x_key in (
        ("reward", "reward.png", "round", "mean reward of own completions", "round"),
        ("accuracy", "accuracy.png", "rounds trained", "held-out accuracy", "rounds_trained"),
    ):
        fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels) + 1.2, 4.4), squeeze=False)
        lows, highs = [], []
        for ax, (title, names) in zip(axes[0], panels, strict=True):
            for curve_name, curve in curves.items():
                arm = curve["arm"]
                if arm not in names:
                    continue
                points = [p for p in curve[key] if p.get("mean") is not None]
                if not points:
                    continue
                x = [p[x_key] for p in points]
                color = colors[arm]
                ax.fill_between(
                    x, [p["p10"] for p in points], [p["p90"] for p in points], color=color, alpha=0.1
                )
                ax.plot(
                    x,
                    [p["mean"] for p in points],
                    color=color,
                    linewidth=1.8,
                    label=curve_name,
                    marker=("s" if curve["size"] == "large" else "o") if key == "accuracy" else None,
                    markersize=3,
                    linestyle=":"
                    if curve["size"] == "large"
                    else ("--" if arm in splits and names is not splits else "-"),
                )
                lows.extend(p["p10"] for p in points)
                highs.extend(p["p90"] for p in points)
            ax.set(xlabel=xlabel, ylabel=ylabel)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        if lows:  # one y range for both panels, fitted to the data
            low, high = min(lows), max(highs)
            pad = max(0.005, (high - low) * 0.06)
            for ax in axes[0]:
                ax.set_ylim(max(0.0, low - pad), high + pad)
        fig.suptitle(
            f"{ylabel}: {settings.peers} peers ({settings.policy}), {settings.rounds} rounds\n"
            f"mean over honest peers and {len(settings.seeds)} seeds, band p10–p90 over (peer, seed)",
            fontsize=10,
        )
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=80, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def write_settings_table(runs: Sequence[tuple[ExperimentSettings, Path]], out: Path) -> Path:
    """settings.md and settings.json in `out`: when sharing pays, one block of rows per setting
    (read back from each setting's table.json), every split against the first on the same seeds."""
    lines = [
        "| setting | configuration | size | held-out gain [95%] | gain vs first split [95%] "
        "| off-specialty gain vs first split [95%] | cumulative reward per peer "
        "| reward vs first split [95%] | groups used / update | generation CPU s / peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    data = []
    for settings, folder in runs:
        rows = json.loads((folder / "table.json").read_text())["rows"]
        for row in rows:
            versus = row.get("vs_first_split") or {}
            used = row["groups_used_per_update"]
            lines.append(
                "| "
                + " | ".join(
                    [
                        settings.setting,
                        row["configuration"],
                        row["size"],
                        _interval_text(row["heldout_gain"]),
                        _interval_text(versus.get("gain_difference")),
                        _interval_text(versus.get("off_specialty_difference")),
                        _fmt(row["cumulative_reward_per_peer"], 2),
                        _interval_text(versus.get("reward_difference"), 2),
                        "–" if used["mean"] is None else f"{used['mean']:.2f}",
                        _fmt(row["generate_cpu_s_per_peer"], 1),
                    ]
                )
                + " |"
            )
            data.append({"setting": settings.setting, **row})
    first = runs[0][0]
    header = (
        f"When sharing pays: {first.peers} peers ({first.policy}), {first.rounds} rounds, seeds "
        f"{', '.join(map(str, first.seeds))}. Intervals are 95%: held-out gains over seeds and questions "
        "(two-way bootstrap), reward differences by Student's t over the paired seeds.\n\n"
    )
    path = out / "settings.md"
    path.write_text(header + "\n".join(lines) + "\n")
    (out / "settings.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path
