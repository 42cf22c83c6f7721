"""A peer's settings, and how they turn into the sans-IO core's rules (protocol/).

`PeerSettings` holds what every peer of one swarm must agree on (swarm_id, seed, tasks,
questions_per_round, verification limits) plus local knobs (sampling split, timeouts, caps).
The functions below cut it into what each part of the core needs: the round machine's
`RoundTiming` and `StagePlan`, the admission inbox's `AdmissionRules`, and the `Game`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from protocol.admission import AdmissionRules
from protocol.game import Game, SingleStageGame
from protocol.games import GAME_NAMES, SINGLE, make_game, spec_of
from protocol.messages import QuestionRef
from protocol.rounds import RoundTiming, StagePlan
from protocol.sampling import SamplingRule
from protocol.tasks import TaskRegistry
from protocol.verification import VerificationLimits
from swarmp2p import peer_knobs as knobs
from swarmp2p.heldout import EvalSettings


def announce_topic(swarm_id: str) -> str:
    return f"swarmp2p/{swarm_id}/announce"


def batch_dht_key(swarm_id: str, round_number: int, stage: int, peer_id: str) -> str:
    return f"/swarmp2p/{swarm_id}/{round_number}/{stage}/{peer_id}"


def _defaults(cls: type) -> dict[str, Any]:
    return {field.name: field.default for field in attrs.fields(cls) if field.default is not attrs.NOTHING}


# The core's own defaults for the knobs PeerSettings carries into it (`carried`): one source each.
_ADMISSION = _defaults(AdmissionRules)
_TIMING = _defaults(RoundTiming)
T = TypeVar("T")


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class PeerSettings:
    """What every peer of one swarm must agree on (swarm_id, seed, tasks, questions_per_round,
    verification limits) plus local knobs (sampling split, timeouts, caps)."""

    swarm_id: str
    seed: int
    tasks: tuple[str, ...]
    questions_per_round: int = attrs.field(
        default=knobs.QUESTIONS_PER_ROUND, validator=attrs.validators.ge(1)
    )
    weights: tuple[float, ...] = ()
    """Task weights for question derivation (empty: uniform); a swarm rule like `tasks`."""
    n_local: int = attrs.field(default=knobs.N_LOCAL, validator=attrs.validators.ge(0))
    n_external: int = attrs.field(default=knobs.N_EXTERNAL, validator=attrs.validators.ge(0))
    max_groups_per_peer: int = attrs.field(
        default=knobs.MAX_GROUPS_PER_PEER, validator=attrs.validators.ge(1)
    )
    sampling: SamplingRule = attrs.field(factory=SamplingRule)
    """How the n_local + n_external training groups are picked (protocol.sampling: fixed,
    adaptive split, filtered peers; optional top-up of a short side)."""
    verify_rewards: bool = True
    """Re-score every fetched batch before accepting it. False takes claimed rewards on trust:
    only for the experiment that measures what verification is worth, never for a real peer."""
    ban_threshold: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    collect_fraction: float = attrs.field(
        default=knobs.COLLECT_FRACTION, validator=[attrs.validators.gt(0.0), attrs.validators.le(1.0)]
    )
    """Share of the time from opening a round to its end spent collecting peers' batches."""
    fetch_timeout_s: float = attrs.field(default=knobs.FETCH_TIMEOUT_S, validator=_positive)
    max_fetch_per_round: int = attrs.field(
        default=_ADMISSION["max_fetch_per_round"], validator=attrs.validators.ge(1)
    )
    fetch_sample: int = attrs.field(default=_ADMISSION["fetch_sample"], validator=attrs.validators.ge(0))
    """0: fetch and verify EVERY announced batch. N > 0: fetch about N per round, chosen by a
    per-(round, peer, sender) hash (unbiased, different for every peer), plus one more for each
    fetch or verification that fails. Bandwidth and CPU per round then stay O(N), not O(swarm)."""
    ban_on_proof: bool = _ADMISSION["ban_on_proof"]
    """Ban at once on signed proof of lying (a forged reward, two batches for one round), instead
    of waiting for `ban_threshold` strikes: honest peers cannot produce such proof by accident."""
    fetch_concurrency: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    unknown_fetch_concurrency: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    """At most this many of the `fetch_concurrency` workers fetch from unknown keys at once (and
    always one fewer than all of them): the others stay free for established senders, whose
    fetches would otherwise wait behind unknown keys' fetches that wait out their timeouts."""
    poll_interval_s: float = attrs.field(default=1.0, validator=_positive)
    max_announce_bytes: int = attrs.field(
        default=_ADMISSION["max_announce_bytes"], validator=attrs.validators.ge(1)
    )
    max_batch_bytes: int = attrs.field(
        default=_ADMISSION["max_batch_bytes"], validator=attrs.validators.ge(1)
    )
    max_duplicates_per_round: int = attrs.field(
        default=_ADMISSION["max_duplicates_per_round"], validator=attrs.validators.ge(0)
    )
    """Identical re-announcements tolerated per sender and round (gossip echoes) before it is a flood."""
    verification_limits: VerificationLimits = attrs.field(factory=VerificationLimits)
    reward_tolerance: float = 1e-6
    keep_published_rounds: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    winners_count: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    history_limit: int = attrs.field(default=10_000, validator=attrs.validators.ge(1))
    dht_sweep: bool = _TIMING["dht_sweep"]
    """At `sweep_fraction` of the collect window, look up in the DHT the batches of peers we know
    (from earlier rounds or the transport) but heard no announcement from this round: gossip
    loss and late joining must not cost a peer its rollouts."""
    sweep_fraction: float = attrs.field(
        default=_TIMING["sweep_fraction"], validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    known_peer_rounds: int = attrs.field(
        default=_ADMISSION["known_peer_rounds"], validator=attrs.validators.ge(1)
    )
    """A peer last seen this many rounds ago is no longer swept for."""
    min_round_remaining: float = attrs.field(
        default=knobs.MIN_ROUND_REMAINING, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    """A round that has less than this share of its stage left when this peer gets to start it
    (its previous round's work overran, e.g. a long training step) is skipped: its batch would
    arrive after every on-time peer's collect deadline, and it would train alone and start the
    next round late too. 0 disables. Needs the stage length, learned from the coordinator's
    stage ends, so it applies from the second round a Peer sees; `swarmp2p node` guards the
    first one itself (`join_min_remaining`)."""
    game: str = attrs.field(default=SINGLE, validator=attrs.validators.in_(GAME_NAMES))
    """The swarm's game, a row of protocol/games.py's registry ("single", "answer-critique-resolve",
    "answer-verify"); the signed schedule names it. A swarm rule: every peer must agree."""
    specialised: bool = False
    """Each peer answers one task of the swarm's list (protocol.questions.specialty): the
    specialised-peers setting of `swarmp2p experiment sharing`. A swarm rule: every peer must
    agree, or batches fail verification as questions not assigned."""
    evaluation: EvalSettings = attrs.field(factory=EvalSettings)
    """Held-out evaluation (swarmp2p/heldout.py): before the first round and every N rounds,
    after the train step and only when it fits before the next round starts. Off by default."""


def carried(settings: PeerSettings, cls: type[T], **given: Any) -> T:
    """An instance of the core's settings class `cls` with every field PeerSettings has by the
    same name taken from `settings`, plus `given`; the others keep `cls`'s defaults. A knob added
    to both reaches the core without another line here."""
    names = {field.name for field in attrs.fields(cls) if field.init} - set(given)
    return cls(**{name: getattr(settings, name) for name in names if hasattr(settings, name)}, **given)


def round_timing(settings: PeerSettings) -> RoundTiming:
    return carried(settings, RoundTiming)


def stage_plan(settings: PeerSettings) -> StagePlan:
    """What the round machine takes from the swarm's game: its stages, which train, which votes."""
    return spec_of(settings.game).plan


def admission_rules(settings: PeerSettings, me: str) -> AdmissionRules:
    return carried(settings, AdmissionRules, me=me)


def game_of(settings: PeerSettings, registry: TaskRegistry) -> Game:
    """The swarm's game, on the swarm's scoring rules."""
    return make_game(settings.game, _rules_of(settings, registry))


def _rules_of(settings: PeerSettings, registry: TaskRegistry) -> SingleStageGame:
    return SingleStageGame(
        seed=settings.seed,
        tasks=tuple(settings.tasks),
        questions_per_round=settings.questions_per_round,
        registry=registry,
        weights=tuple(settings.weights),
        limits=settings.verification_limits,
        tolerance=settings.reward_tolerance,
        rescore=settings.verify_rewards,
        specialised=settings.specialised,
    )


def assigned_questions(
    settings: PeerSettings,
    round_number: int,
    stage: int,
    peer_id: str,
    registry: TaskRegistry | None = None,
) -> tuple[QuestionRef, ...]:
    """The questions `peer_id` must answer in (round, stage) under the swarm's rules: what a peer
    generates for itself and what it re-derives to verify another peer's batch. `registry` says
    which questions are held out (never assigned); without one, none is."""
    return _rules_of(settings, registry or _NO_REGISTRY).questions(round_number, stage, peer_id)


class _NoRegistry:
    """Question derivation needs no registry (only verification re-scores)."""

    def task_names(self) -> tuple[str, ...]:
        return ()

    def score(self, question: QuestionRef, completion_text: str) -> float:
        raise NotImplementedError

    def is_heldout(self, question: QuestionRef) -> bool:
        return False


_NO_REGISTRY = _NoRegistry()
