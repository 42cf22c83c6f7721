"""The swarm's scoring rules: which settings every peer of one swarm must share, and how a peer
takes them from the swarm's schedule instead of its own config.

Peers verify each other's batches by re-deriving the questions a peer had to answer and
re-scoring every completion with their own task registry. That only works if all of them use
the same task list (in the same order), task weights, questions per round, format-reward weight
and difficulty. Like the seed, these belong to the swarm: its first peer fixes them from its
config, they travel in the signed `SwarmSchedule` of every Hello, and a joiner adopts them —
its local values for them are ignored (and it says so, once).

Everything else (sampling split, timeouts, the model, learning rate, ...) stays local.

Used by both `swarmp2p node` (swarmp2p/node.py) and the simulator (simulator/runner.py), so a
simulated swarm and a real one turn a schedule into settings with the same code.
"""

from __future__ import annotations

from typing import Any

import attrs

from protocol.messages import SwarmSchedule

RULE_FIELDS: tuple[str, ...] = ("tasks", "weights", "questions_per_round", "format_reward", "difficulty")
"""The SwarmSchedule fields that are the swarm's scoring rules (see the module docstring)."""


def rules_of_config(trainer_config: Any, questions_per_round: int) -> dict[str, Any]:
    """The rules a swarm's FIRST peer fixes from its local config ([trainer] tasks, weights,
    difficulty, format_reward and [node] questions_per_round), as SwarmSchedule keyword args."""
    return {
        "tasks": tuple(trainer_config.tasks),
        "weights": tuple(float(w) for w in trainer_config.weights),
        "questions_per_round": int(questions_per_round),
        "format_reward": float(trainer_config.format_reward),
        "difficulty": int(trainer_config.difficulty),
    }


def rules_of_schedule(schedule: SwarmSchedule) -> dict[str, Any]:
    return {name: getattr(schedule, name) for name in RULE_FIELDS}


def _show(name: str, value: Any) -> str:
    if name == "tasks":
        return f"tasks {','.join(value)}"
    if name == "weights":
        return "weights uniform" if not value else f"weights {','.join(f'{w:g}' for w in value)}"
    if name == "format_reward":
        return f"format_reward {value:g}"
    return f"{name} {value}"


def _same(name: str, swarm: Any, local: Any) -> bool:
    if name == "weights":  # (1, 1) and () both mean uniform; a scaled mix draws the same tasks
        return _normalized(swarm, len(local) or 1) == _normalized(local, len(swarm) or 1)
    return bool(swarm == local)


def _normalized(weights: tuple[float, ...], count: int) -> tuple[float, ...]:
    if not weights:
        return tuple(1.0 / count for _ in range(count))
    total = sum(weights)
    return tuple(round(w / total, 12) for w in weights)


def differences(schedule: SwarmSchedule, local_rules: dict[str, Any]) -> str | None:
    """One line naming the swarm's rules that differ from the local config's, or None.

    e.g. "swarm rules: tasks a,b; format_reward 0.2 (local config's tasks c; format_reward 0.5 ignored)"
    """
    swarm_rules = rules_of_schedule(schedule)
    differing = _differing(swarm_rules, local_rules)
    if not differing:
        return None
    ours = "; ".join(_show(name, swarm_rules[name]) for name in differing)
    theirs = "; ".join(_show(name, local_rules[name]) for name in differing)
    return f"swarm rules: {ours} (local config's {theirs} ignored)"


def differing_rules(ours: SwarmSchedule, theirs: SwarmSchedule) -> list[str]:
    """The names of the rules two schedules disagree on (empty: they score alike)."""
    return _differing(rules_of_schedule(ours), rules_of_schedule(theirs))


def _differing(rules: dict[str, Any], other: dict[str, Any]) -> list[str]:
    return [name for name in RULE_FIELDS if not _same(name, rules[name], other[name])]


def trainer_config_for(schedule: SwarmSchedule, trainer_config: Any) -> Any:
    """The local TrainerConfig with the swarm's task mix, difficulty and format reward."""
    return attrs.evolve(
        trainer_config,
        tasks=schedule.tasks,
        weights=schedule.weights,
        difficulty=schedule.difficulty,
        format_reward=schedule.format_reward,
    )


def peer_settings_for(schedule: SwarmSchedule, **local: Any) -> Any:
    """PeerSettings whose shared part (swarm id, seed, tasks, weights, questions per round, the
    game) is the schedule's; `local` holds the peer's own knobs (n_local, fetch_timeout_s, ...).
    ValueError: a game this peer lacks, or a schedule whose stages are not the game's."""
    from protocol.games import spec_of
    from swarmp2p.peer import PeerSettings

    spec = spec_of(schedule.game)
    if spec.stage_count > 1 and schedule.stage_count != spec.stage_count:
        # A one-stage game plays once a round whatever the clock's stages (a chain's are its
        # own); a game of several needs exactly its own.
        raise ValueError(
            f"game {spec.name} plays {spec.stage_count} stages a round, "
            f"the schedule says {schedule.stage_count}"
        )

    shared = {"swarm_id", "seed", "tasks", "questions_per_round", "weights", "game"}
    clash = shared & set(local)
    if clash:
        raise TypeError(f"{sorted(clash)} come from the swarm's schedule, not from local settings")
    return PeerSettings(
        swarm_id=schedule.swarm_id,
        seed=schedule.seed,
        tasks=schedule.tasks,
        weights=schedule.weights,
        questions_per_round=schedule.questions_per_round,
        game=spec.name,
        **local,
    )


def reasoning_gym_registry_for(schedule: SwarmSchedule) -> Any:
    """The real task registry (reasoning-gym) scoring by the swarm's rules.

    Raises trainer.tasks.TaskError when the rules name a task this installation cannot build."""
    from trainer.tasks import ReasoningGymRegistry

    return ReasoningGymRegistry(schedule.tasks, schedule.weights, schedule.difficulty, schedule.format_reward)
