"""Checking a peer's rollout batch before anyone trains on it.

A batch claims rewards for completions of named questions. Because every question is
named by (task, dataset seed, index), the receiver regenerates it and re-scores every
completion through its own task registry; a claimed reward that differs is a forgery.
Before the (expensive) re-scoring, cheap shape checks run: group and completion counts,
text sizes, per-token log-probs (at most MAX_COMPLETION_TOKENS, each finite and <= 0: the codec
checks them too, but a batch built in memory never met the codec), questions the sender was
actually assigned (from `questions_for` with the
SENDER's peer id), no question twice, tasks the registry knows.

Verdict reasons (counter keys):
  too_few_groups, too_many_groups, bad_group_size, text_too_long, logprobs_too_long,
  bad_logprobs (NaN, infinite, positive, or not a whole number of float32s), unknown_task,
  unassigned_question, duplicate_question, forged_reward,
  scoring_error   our own registry raised: NOT the sender's fault, do not penalize.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from protocol import limits as wire_limits
from protocol.logprobs import LOGPROB_BYTES, MAX_LOGPROBS_BYTES, logprobs_error
from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch
from protocol.tasks import TaskRegistry


@attrs.frozen
class VerificationLimits:
    min_groups: int = 1
    max_groups: int = wire_limits.MAX_GROUPS_PER_BATCH
    min_completions: int = 2  # fewer cannot carry a GRPO advantage
    max_completions: int = wire_limits.MAX_COMPLETIONS_PER_GROUP
    max_text_bytes: int = wire_limits.MAX_COMPLETION_TEXT_BYTES
    max_logprobs: int = wire_limits.MAX_COMPLETION_TOKENS


@attrs.frozen
class Verdict:
    ok: bool
    reason: str | None
    groups_checked: int
    """Groups fully re-scored before the verdict (all of them when ok)."""


def _reject(reason: str, groups_checked: int = 0) -> Verdict:
    return Verdict(ok=False, reason=reason, groups_checked=groups_checked)


def group_shape_error(group: QuestionGroup, limits: VerificationLimits) -> str | None:
    """The rejection reason when a group's completion count, a completion's UTF-8 size or its
    log-probs are out of bounds, else None. Every game checks a group's shape this way before
    re-scoring it."""
    if not limits.min_completions <= len(group.completions) <= limits.max_completions:
        return "bad_group_size"
    for completion in group.completions:
        if len(completion.text.encode("utf-8", errors="surrogatepass")) > limits.max_text_bytes:
            return "text_too_long"
        logprobs = completion.logprobs
        if not isinstance(logprobs, bytes):
            return "bad_logprobs"
        if len(logprobs) > limits.max_logprobs * LOGPROB_BYTES:
            return "logprobs_too_long"
        if logprobs and logprobs_error(logprobs) is not None:
            return "logprobs_too_long" if len(logprobs) > MAX_LOGPROBS_BYTES else "bad_logprobs"
    return None


def verify_batch(
    batch: RolloutBatch,
    registry: TaskRegistry,
    *,
    expected_questions: Collection[QuestionRef] | None,
    limits: VerificationLimits,
    tolerance: float = 1e-6,
    rescore: bool = True,
) -> Verdict:
    """Accept `batch` only if its shape is within `limits`, its questions are the sender's,
    and every claimed reward matches the registry's score within `tolerance`.

    `rescore=False` skips the re-scoring (claimed rewards are taken on trust): only for
    experiments that measure what verification is worth, never for a real peer."""
    groups = batch.groups
    if len(groups) < limits.min_groups:
        return _reject("too_few_groups")
    if len(groups) > limits.max_groups:
        return _reject("too_many_groups")
    known_tasks = set(registry.task_names())
    expected = None if expected_questions is None else frozenset(expected_questions)
    seen: set[QuestionRef] = set()
    for group in groups:
        shape_error = group_shape_error(group, limits)
        if shape_error is not None:
            return _reject(shape_error)
        if group.question.task not in known_tasks:
            return _reject("unknown_task")
        if expected is not None and group.question not in expected:
            return _reject("unassigned_question")
        if group.question in seen:
            return _reject("duplicate_question")
        seen.add(group.question)
    if not rescore:
        return Verdict(ok=True, reason=None, groups_checked=0)

    for checked, group in enumerate(groups):
        for completion in group.completions:
            try:
                actual = float(registry.score(group.question, completion.text))
            except Exception:  # the registry promises not to raise; if it does, it is our bug
                return _reject("scoring_error", checked)
            # Written as "not <=" so that a NaN claim (or score) counts as a mismatch.
            if not abs(completion.reward - actual) <= tolerance:
                return _reject("forged_reward", checked)
    return Verdict(ok=True, reason=None, groups_checked=len(groups))
