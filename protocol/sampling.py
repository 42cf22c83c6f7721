"""Choosing the training groups of a round: L local + E external, the swarm's core rule.

GRPO learns only from groups whose rewards differ (the advantage is reward minus the
group mean, so equal rewards teach nothing), so such groups are dropped before sampling
and counted. External groups are capped per peer so one prolific (or hostile) peer
cannot dominate another's update.

Selection is a pure function of (inputs, seed): each candidate gets a sha256 key from
(seed, owner, position in owner's list) and candidates are taken in key order. Peers are
keyed by id, not by dict position, so the result does not depend on the order in which
batches arrived or were inserted into the mapping.

Beyond the fixed split, a `SamplingRule` names a policy; its memory between rounds is a
`SamplingState`, passed in and handed back (this module keeps no state and does no IO):

- `fixed`: L local and E external, as configured. With `fill`, a side that has fewer useful
  groups than its share is topped up from the other side (only when both sides have a share,
  so an 8/0 peer never takes external groups), keeping the update at L + E groups whenever the
  swarm offers that many.
- `adaptive`: the split moves by one group per round. A group *teaches* when it has non-zero
  advantage AND one of its completions solved the question (reward >= `solved`): only then
  does GRPO push towards a right answer, not just a format. The peer keeps an exponential
  moving average (`smoothing`) of the teaching share of its own groups and of the external
  groups it accepted; when the external average exceeds its own by more than `margin`, E goes
  up by one (L down by one); when it is lower by more than `margin`, E goes down; E stays in
  [`min_external`, `max_external`] (defaults: a quarter and three quarters of L + E).
- `filtered`: the same teaching share, kept per external peer; a peer observed for at least
  `min_observations` rounds whose average is below `drop_below` times the mean of the observed
  peers is set aside (its groups are taken only when nobody else's are left), and the others
  are drawn with probability proportional to their average (weighted sampling without
  replacement, keys -ln(u) / w with u from sha256), so peers whose rollouts teach more are
  picked more often.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import attrs
import msgpack

from protocol.messages import QuestionGroup

_DOMAIN = "swarmp2p/sampling/v1"
_LOCAL = ""  # owner key of local groups; peer ids are never empty

SAMPLING_KINDS: tuple[str, ...] = ("fixed", "adaptive", "filtered")


@attrs.frozen
class SampledGroups:
    local: tuple[QuestionGroup, ...]
    external: tuple[tuple[str, QuestionGroup], ...]  # (peer id, group)
    dropped_zero_advantage: int

    def all_groups(self) -> tuple[QuestionGroup, ...]:
        """Local then external groups, the order a trainer consumes them in."""
        return self.local + tuple(group for _, group in self.external)


def _fraction(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


@attrs.frozen
class SamplingRule:
    """How a peer picks its training groups (a local choice: peers of one swarm may differ).
    The counts (L, E, per-peer cap) stay in the caller's settings; this holds the policy."""

    kind: str = attrs.field(default="fixed", validator=attrs.validators.in_(SAMPLING_KINDS))
    fill: bool = False
    """Top up a side short of useful groups from the other side (see the module docstring)."""
    solved: float = attrs.field(default=0.55, validator=_fraction)
    """A completion with at least this reward solved its question. Set it between the best wrong
    answer's reward (the swarm's format reward) and a right answer's (1.0): (1 + format) / 2."""
    smoothing: float = attrs.field(default=0.3, validator=_fraction)
    """Weight of the newest round in the moving averages (adaptive, filtered)."""
    margin: float = attrs.field(default=0.05, validator=_fraction)
    """adaptive: the difference in teaching share that moves the split."""
    min_external: int = attrs.field(default=-1, validator=attrs.validators.ge(-1))
    """adaptive: the lowest E; -1 = a quarter of L + E."""
    max_external: int = attrs.field(default=-1, validator=attrs.validators.ge(-1))
    """adaptive: the highest E; -1 = three quarters of L + E."""
    drop_below: float = attrs.field(default=0.5, validator=attrs.validators.ge(0.0))
    """filtered: set aside peers whose average is below this times the observed peers' mean."""
    min_observations: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    """filtered: rounds a peer is observed before it can be set aside."""
    floor: float = attrs.field(default=0.05, validator=_fraction)
    """filtered: the smallest sampling weight (a peer that taught nothing yet can still be drawn)."""
    forget_rounds: int = attrs.field(default=50, validator=attrs.validators.ge(1))
    """filtered: a peer not seen for this many rounds is forgotten (bounds the state)."""

    def external_bounds(self, budget: int) -> tuple[int, int]:
        low = budget // 4 if self.min_external < 0 else min(self.min_external, budget)
        high = budget - budget // 4 if self.max_external < 0 else min(self.max_external, budget)
        return low, max(low, high)


@attrs.frozen
class PeerRecord:
    rate: float  # moving average of the teaching share of this peer's groups
    observations: int
    last_round: int


@attrs.frozen
class SamplingState:
    """What a rule remembers between rounds. Start from `SamplingState()`."""

    n_external: int | None = None
    """adaptive: the current E (None: the configured one)."""
    local_rate: float | None = None
    external_rate: float | None = None
    peers: Mapping[str, PeerRecord] = attrs.field(factory=dict)
    """filtered: per external peer (never mutated: every update builds a new mapping)."""


REWARD_TOLERANCE = 1e-9
"""Rewards closer than this count as equal. A group whose rewards differ by less has advantages
of at most ~1e-5 after normalisation (trainer/grpo.py divides by std + 1e-4): float noise, not a
signal worth a slot in the training batch."""


def rewards_differ(rewards: Sequence[float]) -> bool:
    """True when some completion of a group with these rewards has non-zero advantage."""
    return len(rewards) >= 2 and max(rewards) - min(rewards) > REWARD_TOLERANCE


def has_advantage(group: QuestionGroup) -> bool:
    """The one rule for "this group teaches something": the sampler keeps only such groups and
    the trainer (trainer/policy.py) trains only on them, so the two can never disagree."""
    return rewards_differ([completion.reward for completion in group.completions])


def teaches(group: QuestionGroup, solved: float) -> bool:
    """Non-zero advantage and a solved completion: GRPO pushes towards a right answer."""
    return has_advantage(group) and max(c.reward for c in group.completions) >= solved


def teaching_share(groups: Sequence[QuestionGroup], solved: float) -> float | None:
    if not groups:
        return None
    return sum(teaches(group, solved) for group in groups) / len(groups)


def _key(seed: int, owner: str, position: int) -> bytes:
    return hashlib.sha256(msgpack.packb([_DOMAIN, str(seed), owner, position])).digest()


def _unit(key: bytes) -> float:
    """A number in (0, 1) from a sha256 key."""
    return (int.from_bytes(key[:8], "big") + 0.5) / 2**64


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
    rule: SamplingRule | None = None,
    state: SamplingState | None = None,
) -> SampledGroups:
    """Up to `n_local` local and `n_external` external groups with non-zero advantage,
    at most `max_per_peer` from any one external peer; as many as are available.

    `rule` and `state` pick the policy (default: fixed, no fill). Under `adaptive` the split
    comes from `state.n_external` (same total); `filtered` orders external peers by `state`."""
    _check_count("n_local", n_local)
    _check_count("n_external", n_external)
    _check_count("max_per_peer", max_per_peer)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    rule = rule or SamplingRule()
    state = state or SamplingState()
    if rule.kind == "adaptive" and state.n_external is not None:
        budget = n_local + n_external
        n_external = min(budget, state.n_external)
        n_local = budget - n_external
    dropped = 0

    local_candidates: list[tuple[bytes, QuestionGroup]] = []
    for position, group in enumerate(local):
        if has_advantage(group):
            local_candidates.append((_key(seed, _LOCAL, position), group))
        else:
            dropped += 1
    local_candidates.sort(key=lambda candidate: candidate[0])
    local_order = [group for _, group in local_candidates]

    set_aside = _set_aside(rule, state) if rule.kind == "filtered" else frozenset()
    external_candidates: list[tuple[tuple[int, float, bytes], str, QuestionGroup]] = []
    for peer in sorted(external):
        if not isinstance(peer, str) or not peer:
            raise ValueError(f"external peer ids must be non-empty strings, got {peer!r}")
        weight = _weight(rule, state, peer) if rule.kind == "filtered" else 0.0
        for position, group in enumerate(external[peer]):
            if has_advantage(group):
                key = _key(seed, peer, position)
                # filtered: set-aside peers last, then -ln(u) / w (weighted sampling without
                # replacement). Otherwise the plain key order.
                order = (
                    (int(peer in set_aside), -math.log(_unit(key)) / weight, key) if weight else (0, 0.0, key)
                )
                external_candidates.append((order, peer, group))
            else:
                dropped += 1
    external_candidates.sort(key=lambda candidate: candidate[0])
    external_order: list[tuple[str, QuestionGroup]] = []
    taken_per_peer: dict[str, int] = {}
    for _, peer, group in external_candidates:
        if taken_per_peer.get(peer, 0) >= max_per_peer:
            continue
        taken_per_peer[peer] = taken_per_peer.get(peer, 0) + 1
        external_order.append((peer, group))

    take_local = min(n_local, len(local_order))
    take_external = min(n_external, len(external_order))
    if rule.fill and n_local > 0 and n_external > 0:
        short_local = n_local - take_local
        short_external = n_external - take_external
        take_external = min(len(external_order), take_external + short_local)
        take_local = min(len(local_order), take_local + short_external)
    return SampledGroups(
        local=tuple(local_order[:take_local]),
        external=tuple(external_order[:take_external]),
        dropped_zero_advantage=dropped,
    )


def _observed_mean(state: SamplingState, rule: SamplingRule) -> float | None:
    rates = [record.rate for record in state.peers.values() if record.observations >= rule.min_observations]
    return math.fsum(rates) / len(rates) if rates else None


def _set_aside(rule: SamplingRule, state: SamplingState) -> frozenset[str]:
    mean = _observed_mean(state, rule)
    if mean is None or mean <= 0.0:
        return frozenset()
    return frozenset(
        peer
        for peer, record in state.peers.items()
        if record.observations >= rule.min_observations and record.rate < rule.drop_below * mean
    )


def _weight(rule: SamplingRule, state: SamplingState, peer: str) -> float:
    record = state.peers.get(peer)
    if record is None:  # not seen yet: as good as the average peer
        mean = _observed_mean(state, rule)
        rate = 1.0 if mean is None else mean
    else:
        rate = record.rate
    return max(rule.floor, rate)


def _ema(previous: float | None, value: float, smoothing: float) -> float:
    return value if previous is None else (1.0 - smoothing) * previous + smoothing * value


def observe_round(
    rule: SamplingRule,
    state: SamplingState,
    local: Sequence[QuestionGroup],
    external: Mapping[str, Sequence[QuestionGroup]],
    *,
    round_number: int,
    n_local: int,
    n_external: int,
) -> SamplingState:
    """The state after a round that offered `local` (this peer's own groups) and `external`
    (the verified batches accepted from other peers). Only `adaptive` and `filtered` remember
    anything; `fixed` returns `state` unchanged."""
    if rule.kind == "fixed":
        return state
    if rule.kind == "adaptive":
        local_share = teaching_share(local, rule.solved)
        external_share = teaching_share([g for groups in external.values() for g in groups], rule.solved)
        local_rate = (
            state.local_rate if local_share is None else _ema(state.local_rate, local_share, rule.smoothing)
        )
        external_rate = (
            state.external_rate
            if external_share is None
            else _ema(state.external_rate, external_share, rule.smoothing)
        )
        budget = n_local + n_external
        current = n_external if state.n_external is None else state.n_external
        low, high = rule.external_bounds(budget)
        if local_rate is not None and external_rate is not None:
            if external_rate > local_rate + rule.margin:
                current += 1
            elif external_rate < local_rate - rule.margin:
                current -= 1
        return attrs.evolve(
            state,
            n_external=min(high, max(low, current)),
            local_rate=local_rate,
            external_rate=external_rate,
        )
    peers = {
        peer: record
        for peer, record in state.peers.items()
        if round_number - record.last_round < rule.forget_rounds
    }
    for peer in sorted(external):
        share = teaching_share(external[peer], rule.solved)
        if share is None:
            continue
        record = peers.get(peer)
        if record is None:
            peers[peer] = PeerRecord(rate=share, observations=1, last_round=round_number)
        else:
            peers[peer] = PeerRecord(
                rate=_ema(record.rate, share, rule.smoothing),
                observations=record.observations + 1,
                last_round=round_number,
            )
    return attrs.evolve(state, peers=peers)
