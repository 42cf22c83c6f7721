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

This module runs the jobs; simulator/experiment_report.py turns their records into the tables,
plots and settings files.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from protocol.messages import QuestionGroup
from swarmp2p import peer_knobs as knobs

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
    max_groups_per_peer: int = knobs.MAX_GROUPS_PER_PEER
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
