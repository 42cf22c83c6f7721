"""`--policy trainer`: the real trainer (trainer.policy.TrainerPolicy with the tiny model) as the
simulated peers' PolicyPort, and trainer.tasks.ReasoningGymRegistry as the swarm's registry.

Only sensible for small swarms (<= 5 peers): every peer holds a real model and runs real
generation and GRPO steps, inline on the simulator's one thread (threads would break the
virtual clock's determinism).

Layout under the work directory:

    <work>/models/tiny-<fingerprint>/   the tiny model, built ONCE and shared by every peer
    <work>/peers/warm/checkpoints/      the warmed-up starting point, copied to every peer
    <work>/peers/<index>/checkpoints/   each peer's own checkpoints (crash + restart resumes here)
    <work>/peers/<index>/models -> ../../models   (symlink: the trainer finds the shared build)

The peers directory is wiped at the start of a run, so a seed reproduces a run: a peer must not
resume from a checkpoint a previous run left behind.

Compute time is virtual, as for the cheap policy: every call adds a cost (seconds per question
and per group, times the peer's slowdown) that the simulator's offload sleeps on the virtual clock.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from protocol.messages import Completion, QuestionGroup, QuestionRef, SwarmSchedule
from swarmp2p.peer import derive_seed

TRAINER_TASKS: tuple[str, ...] = ("basic_arithmetic", "calendar_arithmetic")
"""Default tasks: fast to generate and score, and learnable in format by the tiny model."""


@attrs.frozen
class TrainerSimSettings:
    tiny_hidden_size: int = 64
    max_new_tokens: int = 16
    format_reward: float = 0.5
    generate_cost_s: float = 0.5  # virtual seconds per question
    train_cost_s: float = 0.25  # virtual seconds per group
    warmup_steps: int = 20
    """Supervised warm-up of the shared starting point (a fresh tiny model never formats an
    answer, so every reward is 0 and GRPO has no signal). 0: start from the raw build."""


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
    ) -> None:
        self.inner = inner
        self.settings = settings
        self.slowdown = slowdown
        self.forge = forge
        self.sampler_seed = sampler_seed
        self.start_step = start_step
        self.pending_cost_s = 0.0
        self._reseed()

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        self.pending_cost_s += self.settings.generate_cost_s * len(questions) * self.slowdown
        groups = self.inner.generate(questions)
        if self.forge:
            groups = [
                QuestionGroup(g.question, tuple(Completion(c.text, 1.0) for c in g.completions))
                for g in groups
            ]
        return groups

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.pending_cost_s += self.settings.train_cost_s * len(groups) * self.slowdown
        return self.inner.train(groups)

    def save(self) -> None:
        self.inner.save()

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
    """Builds one TrainerPolicy per simulated peer around one shared registry and tiny model."""

    def __init__(
        self,
        work_dir: Path,
        *,
        schedule: SwarmSchedule,
        group_size: int,
        settings: TrainerSimSettings = TrainerSimSettings(),
    ) -> None:
        """`schedule`: the simulated swarm's; its rules (tasks, format reward, difficulty) shape
        every peer's trainer and the shared registry, exactly as they do for `swarmp2p node`."""
        from swarmp2p.rules import reasoning_gym_registry_for, trainer_config_for
        from trainer.config import TrainerConfig
        from trainer.model import model_folder

        self.work_dir = Path(work_dir)
        self.settings = settings
        self.seed = seed = schedule.seed
        local = TrainerConfig(
            model="tiny",
            data_dir=str(self.work_dir),
            device="cpu",
            threads=1,  # one thread: the simulator is single-threaded and must be reproducible
            tiny_hidden_size=settings.tiny_hidden_size,
            num_generations=group_size,
            max_new_tokens=settings.max_new_tokens,
            format_reward=settings.format_reward,
            seed=seed,
        )
        self.base_config = trainer_config_for(schedule, local)
        self.registry = reasoning_gym_registry_for(schedule)
        model_folder(self.base_config)  # build (or reuse) the shared tiny model now, once
        self.peers_dir = self.work_dir / "peers"
        shutil.rmtree(self.peers_dir, ignore_errors=True)
        self.peers_dir.mkdir(parents=True)
        self.start_checkpoints: Path | None = None
        self.start_step = 0
        if settings.warmup_steps > 0:
            from trainer.policy import TrainerPolicy

            warm = TrainerPolicy(attrs.evolve(self.base_config, data_dir=str(self._peer_dir("warm"))))
            warm.warmup(settings.warmup_steps)
            warm.save()
            self.start_step = warm.step
            self.start_checkpoints = self.peers_dir / "warm" / "checkpoints"

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

        peer_dir = self._peer_dir(f"{plan.index:04d}")
        checkpoints = peer_dir / "checkpoints"
        if self.start_checkpoints is not None and not checkpoints.exists():
            # Every peer starts from the warmed-up model: Peer.run's policy.load() restores it.
            shutil.copytree(self.start_checkpoints, checkpoints)
        # The config seed stays the swarm's: it also names the tiny build, which all share.
        config = attrs.evolve(self.base_config, data_dir=str(peer_dir))
        inner = TrainerPolicy(config, registry=self.registry)
        # Each peer samples its own completions (its sampler state is checkpointed with it).
        return TimedPolicy(
            inner,
            self.settings,
            slowdown,
            forge=plan.role == "forge",
            sampler_seed=derive_seed(self.seed, "trainer-sampler", plan.index) % 2**63,
            start_step=self.start_step,
        )
