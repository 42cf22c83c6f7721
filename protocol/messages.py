"""Wire message schemas: every message two peers exchange, as frozen attrs classes.

These classes are pure data. Encoding, size caps and strict decoding live in
`protocol.codec`; signing lives in `protocol.envelope`. Times are integer
milliseconds since the Unix epoch so that no float clock ever crosses the wire.

A question is *named*, never shipped: `QuestionRef(task, dataset_seed, index)` lets any
peer regenerate the question and its reference answer, which is what makes
verification of a peer's claimed rewards possible.
"""

from __future__ import annotations

import attrs

PROTOCOL_VERSION = 4
"""Version 4: `SwarmSchedule` names the swarm's game (`game`, a row of protocol/games.py), which
a version-3 peer took from the stage count; a version-3 schedule lacks the key.
Version 3: every `Completion` carries `logprobs`, its author's per-token sampling
log-probabilities (empty when it has none), which receivers use for importance sampling; a
version-2 batch lacks the key and would be rejected field by field, so the version says it first.
Version 2: `SwarmSchedule` carries the swarm's scoring rules (tasks, weights, questions per
round, format reward, difficulty). A version-1 peer would score rollouts by its own local rules."""


@attrs.frozen
class QuestionRef:
    """Names one reasoning-gym item: the dataset `task`, built with `dataset_seed`, item `index`."""

    task: str
    dataset_seed: int
    index: int


@attrs.frozen
class Completion:
    """One generated answer text and the reward its author claims for it.

    `logprobs`: for each token the author sampled, its log-probability under the distribution
    that sampled it, packed as float32 little-endian (protocol/logprobs.py says why and checks
    it); empty when the author has none to give. Signed with the rest of the batch."""

    text: str
    reward: float
    logprobs: bytes = b""


@attrs.frozen
class QuestionGroup:
    """The G completions one peer generated for one question (a GRPO group)."""

    question: QuestionRef
    completions: tuple[Completion, ...]


@attrs.frozen
class SwarmSchedule:
    """The round clock AND the scoring rules of a swarm, fixed by its first peer and carried in
    hellos; every joiner adopts them, whatever its local config says.

    Round r starts at `genesis_ms + r * round_ms`; a round has `stage_count` equal stages.

    The rules are what peers must agree on to re-score each other's completions identically:
    the task list (its ORDER too: question derivation indexes into it), per-task weights (empty
    = uniform), how many questions each peer answers per round, the weight of the answer-format
    reward, and the reasoning-gym difficulty level (-1 = each dataset's default).

    The rule fields have defaults only so that a schedule used purely as a round clock (tests)
    stays short to build; the wire format requires at least one task, so a schedule without
    rules can never be sent.
    """

    swarm_id: str
    genesis_ms: int
    round_ms: int
    stage_count: int
    seed: int
    tasks: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    questions_per_round: int = 4
    format_reward: float = 0.0
    difficulty: int = -1
    game: str = "single"
    """The swarm's game, by its registry name (protocol/games.py): what every peer plays."""


@attrs.frozen
class Hello:
    """First message on a connection and periodic presence beacon on the swarm topic."""

    protocol_version: int
    peer_id: str
    schedule: SwarmSchedule
    current_round: int
    listen_addrs: tuple[str, ...]
    model: str


@attrs.frozen
class RolloutAnnouncement:
    """Small gossip message: "my batch for (round, stage) exists; fetch it from me"."""

    swarm_id: str
    round: int
    stage: int
    peer_id: str
    batch_digest: bytes  # sha256 of the encoded, signed batch envelope
    group_count: int
    size_bytes: int


@attrs.frozen
class RolloutBatch:
    """All question groups one peer generated in one (round, stage)."""

    swarm_id: str
    round: int
    stage: int
    peer_id: str
    groups: tuple[QuestionGroup, ...]


@attrs.frozen
class FetchRequest:
    """Ask a peer for its own batch of (round, stage) over a direct stream."""

    swarm_id: str
    round: int
    stage: int
    peer_id: str  # whose batch is wanted


@attrs.frozen
class FetchResponse:
    """Answer to a FetchRequest: the signed batch envelope bytes, or found=False."""

    found: bool
    envelope: bytes


@attrs.frozen
class PushedAnnouncement:
    """A small batch pushed together with its announcement, in ONE gossip message (eager push).

    Both parts are exactly what the author would otherwise send apart, each already signed:
    `announcement` is the sealed RolloutAnnouncement, `envelope` the sealed batch whose sha256
    the announcement names (`batch_digest`). No signature of its own: a relay that swaps the
    batch breaks the digest, one that swaps the announcement breaks its signature. A receiver
    handles the announcement as if it came alone and, if it decides to fetch the batch, takes
    it from here instead of opening a stream to the author (swarmp2p/pushed.py)."""

    announcement: bytes
    envelope: bytes


@attrs.frozen
class RewardReport:
    """A peer's mean reward for one (round, stage), as reported to the coordinator or DHT."""

    swarm_id: str
    round: int
    stage: int
    peer_id: str
    reward: float


@attrs.frozen
class WinnersVote:
    """A peer's vote for the round's best peers (by verified reward)."""

    swarm_id: str
    round: int
    peer_id: str
    winners: tuple[str, ...]


WireMessage = (
    Hello
    | RolloutAnnouncement
    | RolloutBatch
    | FetchRequest
    | FetchResponse
    | PushedAnnouncement
    | RewardReport
    | WinnersVote
)

# The kind name written on the wire for each top-level message class. Changing one
# of these breaks compatibility and must change PROTOCOL_VERSION.
KIND_OF: dict[type, str] = {
    Hello: "hello",
    RolloutAnnouncement: "announce",
    RolloutBatch: "batch",
    FetchRequest: "fetch_req",
    FetchResponse: "fetch_resp",
    PushedAnnouncement: "pushed",
    RewardReport: "reward",
    WinnersVote: "winners",
}
CLASS_OF: dict[str, type] = {kind: cls for cls, kind in KIND_OF.items()}
