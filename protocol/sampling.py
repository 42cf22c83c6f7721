"""Choosing the training groups of a round: L local + E external, the swarm's core rule.

GRPO learns only from groups whose rewards differ (the advantage is reward minus the
group mean, so equal rewards teach nothing), so such groups are dropped before sampling
and counted. External groups are capped per peer so one prolific (or hostile) peer
cannot dominate another's update.

Selection is a pure function of (inputs, seed): each candidate gets a sha256 key from
(seed, owner, position in owner's list) and candidates are taken in key order. Peers are
keyed by id, not by dict position, so the result does not depend on the order in which
batches arrived or were inserted into the mapping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import attrs
import msgpack

from protocol.messages import QuestionGroup

_DOMAIN = "swarmp2p/sampling/v1"
_LOCAL = ""  # owner key of local groups; peer ids are never empty


@attrs.frozen
class SampledGroups:
    local: tuple[QuestionGroup, ...]
    external: tuple[tuple[str, QuestionGroup], ...]  # (peer id, group)
    dropped_zero_advantage: int

    def all_groups(self) -> tuple[QuestionGroup, ...]:
        """Local then external groups, the order a trainer consumes them in."""
        return self.local + tuple(group for _, group in self.external)


def has_advantage(group: QuestionGroup) -> bool:
    """True when the group's rewards are not all equal (some completion has non-zero advantage)."""
    rewards = [completion.reward for completion in group.completions]
    return len(rewards) >= 2 and min(rewards) != max(rewards)


def _key(seed: int, owner: str, position: int) -> bytes:
    return hashlib.sha256(msgpack.packb([_DOMAIN, str(seed), owner, position])).digest()


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")


def sample_training_groups(
    local: Sequence[QuestionGroup],
    external: Mapping[str, Sequence[QuestionGroup]],
    *,
    n_local: int,
    n_external: int,
    max_per_peer: int,
    seed: int,
) -> SampledGroups:
    """Up to `n_local` local and `n_external` external groups with non-zero advantage,
    at most `max_per_peer` from any one external peer; as many as are available."""
    _check_count("n_local", n_local)
    _check_count("n_external", n_external)
    _check_count("max_per_peer", max_per_peer)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    dropped = 0

    local_candidates: list[tuple[bytes, QuestionGroup]] = []
    for position, group in enumerate(local):
        if has_advantage(group):
            local_candidates.append((_key(seed, _LOCAL, position), group))
        else:
            dropped += 1
    local_candidates.sort(key=lambda candidate: candidate[0])
    chosen_local = tuple(group for _, group in local_candidates[:n_local])

    external_candidates: list[tuple[bytes, str, QuestionGroup]] = []
    for peer in sorted(external):
        if not isinstance(peer, str) or not peer:
            raise ValueError(f"external peer ids must be non-empty strings, got {peer!r}")
        for position, group in enumerate(external[peer]):
            if has_advantage(group):
                external_candidates.append((_key(seed, peer, position), peer, group))
            else:
                dropped += 1
    external_candidates.sort(key=lambda candidate: candidate[0])
    taken_per_peer: dict[str, int] = {}
    chosen_external: list[tuple[str, QuestionGroup]] = []
    for _, peer, group in external_candidates:
        if len(chosen_external) >= n_external:
            break
        if taken_per_peer.get(peer, 0) >= max_per_peer:
            continue
        taken_per_peer[peer] = taken_per_peer.get(peer, 0) + 1
        chosen_external.append((peer, group))

    return SampledGroups(local=chosen_local, external=tuple(chosen_external), dropped_zero_advantage=dropped)
