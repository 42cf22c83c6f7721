"""The simulator's outside oracle: every group a peer trains on is re-scored by the registry, and a
claimed reward it disagrees with is a forged batch that got through verification."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from protocol.messages import QuestionGroup, QuestionRef


class GroupAudit:
    """The oracle's verdict per trained group, shared by all peers' `AuditedPolicy`: an
    accepted external group is the same object for every peer that trains on it, so it is
    re-scored once, not once per trainer. Remembered by identity (the entry holds the group, so
    its id cannot be reused); bounded."""

    def __init__(self, registry: Any, max_entries: int = 20_000) -> None:
        self.registry = registry
        self.max_entries = max_entries
        self._seen: dict[int, tuple[QuestionGroup, bool]] = {}

    def honest(self, group: QuestionGroup) -> bool:
        entry = self._seen.get(id(group))
        if entry is not None and entry[0] is group:
            return entry[1]
        ok = all(
            abs(self.registry.score(group.question, c.text) - c.reward) <= 1e-6 for c in group.completions
        )
        self._seen[id(group)] = (group, ok)
        if len(self._seen) > self.max_entries:
            del self._seen[next(iter(self._seen))]
        return ok


class AuditedPolicy:
    """Delegates to a policy and checks, as an outside oracle, every group it is trained on:
    any claimed reward the registry disagrees with means a forged batch got through."""

    def __init__(self, inner: Any, audit: GroupAudit, on_invalid: Callable[[], None]) -> None:
        self.inner = inner
        self.audit = audit
        self.on_invalid = on_invalid

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        return self.inner.generate(questions)

    def generate_items(self, items: Sequence[Any]) -> list[QuestionGroup]:
        return self.inner.generate_items(items)

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        for group in groups:
            if not self.audit.honest(group):
                self.on_invalid()
        return self.inner.train(groups)

    def save(self) -> None:
        self.inner.save()

    def load(self) -> bool:
        return self.inner.load()

    def evaluate(self) -> dict[str, Any]:
        return self.inner.evaluate()

    @property
    def cancellable(self) -> bool:
        return bool(self.inner.cancellable)

    def cancel(self) -> None:
        self.inner.cancel()

    def reset_cancel(self) -> None:
        self.inner.reset_cancel()

    def __getattr__(self, name: str) -> Any:
        # What the simulator reads off the inner policy (take_cost, mean_skill, ...).
        return getattr(self.inner, name)
