"""A cheap simulated learner implementing PolicyPort, so swarm dynamics can be studied without torch.

The model: a policy has a per-task skill `s[t]` (probability that a formatted answer is correct)
and a format skill `f` (probability that an answer is well formatted). Generation samples G
completions per question from those probabilities with a deterministic RNG. Training is a
GRPO-shaped update: for every group whose rewards differ, each completion's normalized advantage
pulls the skill towards what that completion did:

    s[t] += lr * mean_i( adv_i * (correct_i - s[t]) )      f += lr * mean_i( adv_i * (formatted_i - f) )

so groups with signal teach, groups with equal rewards teach nothing, and external groups from
peers that are better at a task teach it (the point of sharing rollouts). It is a caricature of
learning, not of a transformer — enough to compare sampling splits, faults and attacks.

Compute time is virtual: each call adds to `pending_cost_s`, which the simulator's offload turns
into `trio.sleep` on the virtual clock (slow peers have a larger `slowdown`).

`evaluate()` answers a fixed held-out set (questions at indices from protocol.questions'
EVAL_INDEX_BASE, which training never draws) once each, from the same skills, and returns the
result shape of trainer/policy.py's `evaluate()` marked `"simulated": True`: its accuracy is
this caricature's skill, not a model's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import attrs

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.questions import EVAL_INDEX_BASE
from protocol.seeds import derive_seed
from protocol.staged import StageItem
from simulator.answerers import answerer_of
from simulator.registry import SimTaskRegistry, format_answer, reference_answer


@attrs.frozen
class SimPolicyParams:
    group_size: int = 4
    learning_rate: float = 0.03
    initial_skill: tuple[float, float] = (0.02, 0.25)  # per-task skill drawn uniformly in this range
    initial_format: tuple[float, float] = (0.2, 0.5)
    generate_cost_s: float = 0.5  # virtual seconds per question
    train_cost_s: float = 0.25  # virtual seconds per group
    eval_questions: int = 16  # held-out questions per task
    eval_generations_to_log: int = 3
    eval_cost_s: float = 0.1  # virtual seconds per held-out question (one completion each)
    eval_dataset_seed: int = 20261123  # the held-out set's dataset seed (trainer: eval_seed)


@attrs.frozen
class Checkpoint:
    skills: tuple[tuple[str, float], ...]
    format_skill: float
    steps: int


class CheckpointStore:
    """Where simulated peers save their policies; survives a peer's crash (like a disk)."""

    def __init__(self) -> None:
        self._saved: dict[str, Checkpoint] = {}

    def save(self, name: str, checkpoint: Checkpoint) -> None:
        self._saved[name] = checkpoint

    def load(self, name: str) -> Checkpoint | None:
        return self._saved.get(name)


class SimPolicy:
    def __init__(
        self,
        name: str,
        registry: SimTaskRegistry,
        *,
        seed: int,
        params: SimPolicyParams = SimPolicyParams(),
        store: CheckpointStore | None = None,
        slowdown: float = 1.0,
    ) -> None:
        self.name = name
        self.registry = registry
        self.params = params
        self.store = store
        self.slowdown = slowdown
        self.seed = seed
        init = random.Random(derive_seed(seed, name, "init"))
        self.skills = {task: init.uniform(*params.initial_skill) for task in registry.task_names()}
        self.format_skill = init.uniform(*params.initial_format)
        self.steps = 0
        self.pending_cost_s = 0.0
        self.trained_groups: list[QuestionGroup] = []  # what train() was given (oracle for tests)
        self.keep_trained_groups = False

    # ---- PolicyPort ----------------------------------------------------------------------

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        self.pending_cost_s += self.params.generate_cost_s * len(questions) * self.slowdown
        return [self._group(question) for question in questions]

    def generate_items(self, items: Sequence[StageItem]) -> list[QuestionGroup]:
        """Answer the items of a later stage of a multi-stage game by its answerer (the module
        its registry row names: simulator/answerers/). Rewards by the item's own score, as
        every verifier does."""
        self.pending_cost_s += self.params.generate_cost_s * len(items) * self.slowdown
        return [self._item_group(item) for item in items]

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.pending_cost_s += self.params.train_cost_s * len(groups) * self.slowdown
        if self.keep_trained_groups:
            self.trained_groups.extend(groups)
        lr = self.params.learning_rate
        used = 0
        for group in groups:
            rewards = [completion.reward for completion in group.completions]
            if len(rewards) < 2:
                continue
            mean = math.fsum(rewards) / len(rewards)
            std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
            if std == 0.0:
                continue
            used += 1
            task = group.question.task
            skill = self.skills.get(task)
            skill_push = format_push = 0.0
            for reward in rewards:
                advantage = (reward - mean) / std
                # Formatted = earned at least the swarm's format reward (a wrong but formatted
                # answer earns exactly that; with a zero format reward only correct ones count).
                formatted = reward > 0.0 and reward >= self.registry.format_reward
                correct = reward >= 1.0
                format_push += advantage * (float(formatted) - self.format_skill)
                if skill is not None:
                    skill_push += advantage * (float(correct) - skill)
            n = len(rewards)
            self.format_skill = _clamp(self.format_skill + lr * format_push / n)
            if skill is not None:
                self.skills[task] = _clamp(skill + lr * skill_push / n)
        self.steps += 1
        return {"groups": float(len(groups)), "groups_with_signal": float(used), "skill": self.mean_skill()}

    def save(self) -> None:
        if self.store is not None:
            self.store.save(
                self.name,
                Checkpoint(tuple(sorted(self.skills.items())), self.format_skill, self.steps),
            )

    def load(self) -> bool:
        checkpoint = self.store.load(self.name) if self.store is not None else None
        if checkpoint is None:
            return False
        self.skills = dict(checkpoint.skills)
        self.format_skill = checkpoint.format_skill
        self.steps = checkpoint.steps
        return True

    cancellable = False
    """PolicyPort: a cancel scope ends the simulated compute time; cancel() has nothing to stop."""

    def cancel(self) -> None:
        pass

    def reset_cancel(self) -> None:
        pass

    def evaluate(self) -> dict[str, Any]:
        """One answer per held-out question (the same questions every time, sampled from a seed
        fixed by the policy's state: the same policy gives the same result). Accuracy counts
        correct formatted answers; reward is the swarm's. Costs `eval_cost_s` per question."""
        params = self.params
        tasks = self.registry.task_names()
        cost = params.eval_cost_s * params.eval_questions * len(tasks) * self.slowdown
        self.pending_cost_s += cost
        rng = random.Random(derive_seed(self.seed, self.name, self.steps, "eval"))
        per_task: dict[str, dict[str, float]] = {}
        answered: list[dict[str, Any]] = []
        for task in tasks:
            correct_sum = reward_sum = 0.0
            for i in range(params.eval_questions):
                question = QuestionRef(task, params.eval_dataset_seed, EVAL_INDEX_BASE + i)
                text = self.answer(question, rng)
                reward = self.registry.score(question, text)
                correct = reward >= 1.0
                correct_sum += correct
                reward_sum += reward
                if i * len(tasks) < params.eval_generations_to_log:
                    answered.append(
                        {
                            "task": task,
                            "index": question.index,
                            "completion": text,
                            "reference": reference_answer(question),
                            "correct": correct,
                            "reward": reward,
                        }
                    )
            n = params.eval_questions
            per_task[task] = {"accuracy": correct_sum / max(1, n), "reward": reward_sum / max(1, n), "n": n}
        # The logged generations take turns over the tasks: the first question of each, then the second...
        samples = sorted(answered, key=lambda sample: sample["index"])[: params.eval_generations_to_log]
        return {
            "step": self.steps,
            "accuracy": math.fsum(t["accuracy"] for t in per_task.values()) / len(per_task),
            "reward": math.fsum(t["reward"] for t in per_task.values()) / len(per_task),
            "questions": params.eval_questions * len(tasks),
            "per_task": per_task,
            "samples": samples,
            "seconds": cost,  # virtual
            "simulated": True,
        }

    # ---- helpers -------------------------------------------------------------------------

    def mean_skill(self) -> float:
        return math.fsum(self.skills.values()) / len(self.skills)

    def take_cost(self) -> float:
        cost, self.pending_cost_s = self.pending_cost_s, 0.0
        return cost

    def _group(self, question: QuestionRef) -> QuestionGroup:
        rng = random.Random(
            derive_seed(
                self.seed, self.name, self.steps, question.task, question.dataset_seed, question.index
            )
        )
        completions = []
        for _ in range(self.params.group_size):
            text = self.answer(question, rng)
            completions.append(Completion(text=text, reward=self.registry.score(question, text)))
        return QuestionGroup(question=question, completions=tuple(completions))

    def _item_group(self, item: StageItem) -> QuestionGroup:
        ref = item.ref
        rng = random.Random(derive_seed(self.seed, self.name, self.steps, item.stage, ref.task, ref.index))
        answer = answerer_of(item.game)
        completions = []
        for _ in range(self.params.group_size):
            text = answer(self, item, rng)
            completions.append(Completion(text=text, reward=item.score(text, self.registry)))
        return QuestionGroup(question=ref, completions=tuple(completions))

    def answer(self, question: QuestionRef, rng: random.Random) -> str:
        """One answer to `question` drawn from the skills (what answerers of later stages use
        when an item asks for an answer of the policy's own)."""
        answer = reference_answer(question)
        if rng.random() < self.format_skill:
            if rng.random() < self.skills.get(question.task, 0.0):
                return format_answer(answer)
            return format_answer(str((int(answer) + 1 + rng.randrange(998)) % 1000))
        return answer if rng.random() < 0.5 else "I think it is " + answer


class ForgingPolicy(SimPolicy):
    """A byzantine learner that poisons: its completions are honest (plausible text from its own
    skills), its claimed rewards are inverted. Right answers are claimed 0.0 and wrong ones 1.0;
    a group whose answers all scored alike has its first completion's claim flipped back, so
    every group has spread (nonzero advantage) and would be trained on, pulling a learner away
    from right answers, by any peer that takes the claims on trust. At least G-1 claims of
    each group disagree with the registry, so verification catches every batch.

    (Claiming 1.0 everywhere, the earlier forgery, gives every group zero advantage: dropped
    before training whether or not anyone verifies, so it tested nothing.)"""

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        return [forged_group(group) for group in super().generate(questions)]

    def generate_items(self, items: Sequence[StageItem]) -> list[QuestionGroup]:
        return [forged_group(group) for group in super().generate_items(items)]


def forged_group(group: QuestionGroup) -> QuestionGroup:
    """`group` with inverted claimed rewards and guaranteed spread (see ForgingPolicy)."""
    claims = [0.0 if completion.reward >= 0.5 else 1.0 for completion in group.completions]
    if len(claims) > 1 and len(set(claims)) == 1:
        claims[0] = 1.0 - claims[0]
    return QuestionGroup(
        question=group.question,
        completions=tuple(
            Completion(text=completion.text, reward=claim)
            for completion, claim in zip(group.completions, claims, strict=True)
        ),
    )


def _clamp(value: float) -> float:
    return min(0.999, max(0.001, value))
