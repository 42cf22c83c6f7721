"""`--policy trainer`: the real trainer (trainer.policy.TrainerPolicy with the tiny model) as the
simulated peers' PolicyPort, and trainer.tasks.ReasoningGymRegistry as the swarm's registry.

For small swarms (up to MAX_TRAINER_PEERS, 8-16 in practice): every peer holds a real model
(its own weights and AdamW state) and runs real generation and GRPO steps, inline on the
simulator's one thread with one torch thread (threads would break the virtual clock's
determinism). What can be shared is: the tiny model build (one folder per model size), the
tokenizer (one object per build, loaded once) and the task registry (one for the swarm).

Layout under the work directory:

    <work>/models/tiny-<fingerprint>/   the tiny model, built ONCE and shared by every peer
                                        (a second one for the larger half of a hetero swarm)
    <work>/peers/start-<size>/checkpoints/  the warmed-up starting point, copied to every peer
    <work>/peers/<index>/checkpoints/   each peer's own checkpoints (crash + restart resumes here)
    <work>/peers/<index>/models -> ../../models   (symlink: the trainer finds the shared build)

The peers directory is wiped at the start of a run, so a seed reproduces a run: a peer must not
resume from a checkpoint a previous run left behind.

Compute time is virtual, as for the cheap policy: every call adds a cost (seconds per question
and per group, times the peer's slowdown) that the simulator's offload sleeps on the virtual clock.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from protocol.messages import Completion, QuestionGroup, QuestionRef, SwarmSchedule
from protocol.seeds import derive_seed


@attrs.frozen
class TrainerSimSettings:
    """How the simulator runs real trainers. What they train (model, tasks, sizes, lr, ...) is a
    trainer.config.TrainerConfig: the trainer's own defaults unless the caller passes one."""

    generate_cost_s: float = 0.5  # virtual seconds per question
    train_cost_s: float = 0.25  # virtual seconds per group
    warmup_steps: int = -1
    """Supervised warm-up of the shared starting point: a raw tiny model (tiny_pretrain_steps 0)
    never formats an answer, so every reward is 0 and GRPO has no signal. -1: 15 steps for a raw
    tiny model, none for a pre-trained one (as `swarmp2p node`); 0: none."""
    models_dir: str = ""
    """Where the tiny builds are cached: "" = `<work>/models`; else `<work>/models` is a link to
    this folder (`swarmp2p simulate` and the experiment share the trainer's `.swarmp2p/models`:
    the pre-training of a build then runs once per machine, not once per run)."""
    eval_cost_s: float = 0.02  # virtual seconds per held-out question
    checkpoints: bool = True
    """Save a checkpoint after every train step (crash + restart resumes). The sharing experiment
    turns it off: it simulates no crashes, and writing 8 models a round costs real time."""
    forge: str = "constant"
    """What a `forge` peer claims: "constant" (reward 1.0 for everything: zero advantage, so no
    trainer ever uses it) or "invert" (1 - reward: wrong answers look right, and the groups keep
    their advantage: poison for any peer that trains on them unverified)."""


FORGE_MODES = ("constant", "invert")


def forged(groups: Sequence[QuestionGroup], mode: str) -> list[QuestionGroup]:
    """`groups` with the rewards a forging peer claims (see TrainerSimSettings.forge)."""
    if mode not in FORGE_MODES:
        raise ValueError(f"forge mode must be one of {FORGE_MODES}, got {mode!r}")
    return [
        QuestionGroup(
            g.question,
            tuple(Completion(c.text, 1.0 if mode == "constant" else 1.0 - c.reward) for c in g.completions),
        )
        for g in groups
    ]


class TimedPolicy:
    """Wraps a PolicyPort and charges virtual compute time for each call (see `take_cost`).
    `forge=True` makes it a byzantine peer that claims reward 1.0 for every completion."""

    def __init__(
        self,
        inner: Any,
        settings: TrainerSimSettings,
        slowdown: float,
        *,
        forge: bool = False,
        sampler_seed: int | None = None,
        start_step: int = 0,
        start_eval: dict[str, Any] | None = None,
    ) -> None:
        self.inner = inner
        self.settings = settings
        self.slowdown = slowdown
        self.forge = forge
        self.sampler_seed = sampler_seed
        self.start_step = start_step
        self.start_eval = start_eval  # shared by every peer of one model size (see evaluate)
        self.pending_cost_s = 0.0
        self._reseed()

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        self.pending_cost_s += self.settings.generate_cost_s * len(questions) * self.slowdown
        groups = self.inner.generate(questions)
        if self.forge:
            groups = forged(groups, self.settings.forge)
        return groups

    def generate_items(self, items: Sequence[Any]) -> list[QuestionGroup]:
        """A later stage's items (answer -> critique -> resolve), charged like questions."""
        self.pending_cost_s += self.settings.generate_cost_s * len(items) * self.slowdown
        groups = self.inner.generate_items(items)
        if self.forge:
            groups = forged(groups, self.settings.forge)
        return groups

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.pending_cost_s += self.settings.train_cost_s * len(groups) * self.slowdown
        return self.inner.train(groups)

    def save(self) -> None:
        if self.settings.checkpoints:
            self.inner.save()

    cancellable = False
    """PolicyPort: its calls are charged as virtual time, which a cancel scope ends (the
    inner trainer is not cancelled through it)."""

    def cancel(self) -> None:
        pass

    def reset_cancel(self) -> None:
        pass

    def evaluate(self) -> dict[str, Any]:
        """The trainer's held-out evaluation (swarmp2p/heldout.py calls it when due), charged
        `eval_cost_s` of virtual time per question."""
        # Every peer of a size starts from the same weights, and an evaluation is a function of
        # the weights alone (its sampler is seeded afresh from eval_seed): the shared starting
        # point is evaluated once, by the first peer that asks, and the others reuse it.
        at_start = self.start_eval is not None and self.inner.step == self.start_step
        if at_start and self.start_eval:
            result = copy.deepcopy(self.start_eval)
        else:
            result = self.inner.evaluate()
            if at_start:
                self.start_eval.update(copy.deepcopy(result))
        self.pending_cost_s += self.settings.eval_cost_s * int(result.get("questions", 0)) * self.slowdown
        return result

    def load(self) -> bool:
        restored = self.inner.load()
        if restored and self.inner.step == self.start_step:
            self._reseed()  # restored the shared starting point: sample as this peer, not as it
        return restored

    def _reseed(self) -> None:
        if self.sampler_seed is not None:
            self.inner.sampler.manual_seed(self.sampler_seed)

    def take_cost(self) -> float:
        cost, self.pending_cost_s = self.pending_cost_s, 0.0
        return cost


class TrainerSwarm:
    """Builds one TrainerPolicy per simulated peer around one shared registry and tiny model
    (two with `large`: a heterogeneous swarm)."""

    def __init__(
        self,
        work_dir: Path,
        *,
        schedule: SwarmSchedule,
        group_size: int,
        settings: TrainerSimSettings = TrainerSimSettings(),
        base_config: Any = None,
        large: Mapping[str, Any] | None = None,
    ) -> None:
        """`schedule`: the simulated swarm's; its rules (tasks, format reward, difficulty) shape
        every peer's trainer and the shared registry, exactly as they do for `swarmp2p node`.

        `base_config`: a trainer.config.TrainerConfig to start from (its model, sizes, lr, and its
        seed, which names the tiny build: every seed of an experiment then starts from the same
        model); None: the trainer's defaults (seed 0: the model `swarmp2p train` builds, cached
        once per machine with TrainerSimSettings.models_dir). Either way the simulator
        sets data_dir, device (cpu), threads (1), num_generations (`group_size`) and the
        schedule's rules; each peer's sampler is seeded from the schedule's seed and its index.

        `large`: TrainerConfig overrides (e.g. {"tiny_hidden_size": 256}) for every peer of odd
        index: half the swarm runs a larger model (`size_of(index)` says which)."""
        from swarmp2p.rules import reasoning_gym_registry_for, trainer_config_for
        from trainer.config import TrainerConfig

        self.work_dir = Path(work_dir)
        self.settings = settings
        self.seed = schedule.seed
        if base_config is None:
            base_config = TrainerConfig()
        local = attrs.evolve(
            base_config,
            data_dir=str(self.work_dir),
            device="cpu",
            threads=1,  # one thread: the simulator is single-threaded and must be reproducible
            num_generations=group_size,
        )
        self.base_config = trainer_config_for(schedule, local)
        self.large = dict(large or {})
        self.configs = {"base": self.base_config}
        if self.large:
            self.configs["large"] = attrs.evolve(self.base_config, **self.large)
        self.registry = reasoning_gym_registry_for(schedule)
        if settings.models_dir:
            _link(self.work_dir / "models", Path(settings.models_dir))
        self.peers_dir = self.work_dir / "peers"
        shutil.rmtree(self.peers_dir, ignore_errors=True)
        self.peers_dir.mkdir(parents=True)
        self.start_checkpoints: dict[str, Path] = {}
        self.start_step: dict[str, int] = {}
        self.tokenizers: dict[str, Any] = {}
        self.start_eval: dict[str, dict[str, Any]] = {}  # size -> evaluation of the starting point
        self.policies: dict[int, TimedPolicy] = {}  # the newest incarnation of each peer
        for size, config in self.configs.items():
            self._prepare(size, config)

    def _prepare(self, size: str, config: Any) -> None:
        """Build (or reuse) the size's tiny model, load its tokenizer once, and checkpoint the
        shared starting point (after the supervised warm-up, when there is one)."""
        from trainer.model import model_folder
        from trainer.policy import TrainerPolicy

        model_folder(config)  # build (or reuse) the shared tiny model now, once
        start = TrainerPolicy(attrs.evolve(config, data_dir=str(self._peer_dir(f"start-{size}"))))
        self.tokenizers[size] = start.tokenizer
        self.start_step[size] = 0
        steps = self.settings.warmup_steps
        if steps < 0:
            steps = 15 if config.model == "tiny" and config.tiny_pretrain_steps == 0 else 0
        if steps > 0:
            start.warmup(steps)
            start.save()
            self.start_step[size] = start.step
            self.start_checkpoints[size] = self.peers_dir / f"start-{size}" / "checkpoints"

    def size_of(self, index: int) -> str:
        return "large" if self.large and index % 2 == 1 else "base"

    def _peer_dir(self, name: str) -> Path:
        peer_dir = self.peers_dir / name
        peer_dir.mkdir(exist_ok=True)
        models = peer_dir / "models"
        if not models.exists():
            os.symlink(Path("..") / ".." / "models", models, target_is_directory=True)
        return peer_dir

    def policy(self, *, plan: Any, registry: Any, store: Any, slowdown: float) -> TimedPolicy:
        """A simulator `policy_factory`: a fresh TrainerPolicy for `plan`'s peer (a restart after
        a crash gets a new one, which resumes from the peer's newest checkpoint)."""
        from trainer.policy import TrainerPolicy

        size = self.size_of(plan.index)
        peer_dir = self._peer_dir(f"{plan.index:04d}")
        checkpoints = peer_dir / "checkpoints"
        start = self.start_checkpoints.get(size)
        if start is not None and not checkpoints.exists():
            # Every peer starts from the warmed-up model: Peer.run's policy.load() restores it.
            shutil.copytree(start, checkpoints)
        # The config seed names the tiny build, which all peers of a size share.
        config = attrs.evolve(self.configs[size], data_dir=str(peer_dir))
        inner = TrainerPolicy(config, registry=self.registry)
        inner.tokenizer = self.tokenizers[size]  # one tokenizer per build, not one per peer
        # Each peer samples its own completions (its sampler state is checkpointed with it).
        timed = TimedPolicy(
            inner,
            self.settings,
            slowdown,
            forge=plan.role == "forge",
            sampler_seed=derive_seed(self.seed, "trainer-sampler", plan.index) % 2**63,
            start_step=self.start_step[size],
            start_eval=self.start_eval.setdefault(size, {}),
        )
        self.policies[plan.index] = timed
        return timed


def _link(link: Path, target: Path) -> None:
    """Make `link` a symlink to `target` (created), replacing whatever `link` was."""
    target = target.resolve()
    target.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        if link.resolve() == target:
            return
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
