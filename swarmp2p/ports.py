"""The ports the node runtime talks through. Each has a real adapter and a simulated one.

- NetworkPort: real = libp2p (swarmp2p/net/), sim = in-memory (simulator/network.py).
- CoordinatorPort: real = the SwarmCoordinator contract over web3 (swarmp2p/chain/) or the
  chain-less schedule (swarmp2p/schedule.py); sim = the same contract on one shared
  in-process chain, or the schedule.
- PolicyPort: real = trainer/ (torch + transformers), sim = simulator/policy.py.
- Clock: real = wall clock; sim = trio's virtual clock (its wakeable sleep parked on the
  simulated world's timer heap).

Every method the runtime calls on a port is declared here: the Peer never probes an adapter
with getattr. Abilities that only some transports have are declared too, with the answer a
transport without them gives (`subscribe_inline` returns False, `bounds_waits` is False,
`push_max_bytes` is 0).

Payloads cross the network port as raw bytes: the node decodes them with `protocol.codec`
so that every inbound message is validated and counted in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs

from protocol.messages import QuestionGroup, QuestionRef
from protocol.stage_inputs import StageItem


@attrs.frozen
class InboundMessage:
    """A message received on a topic. `transport_sender` is who the transport says sent it
    (libp2p: the pubsub message's signed `from`; sim: the sending virtual peer)."""

    topic: str
    transport_sender: str
    data: bytes


@attrs.frozen(eq=False)
class InlineHandler:
    """A `subscribe_inline` handler (callable per message) that an in-process transport may also
    call once for many receivers: `many([(receiver, [message, ...]), ...])` with the `receiver`
    of each subscribed handler sharing the same `many` and the messages that reach it at one
    instant, in delivery order. `many` must decide for each receiver exactly what `one(message)`
    for each of its messages in turn would (the simulator's world hands a gossip message to
    hundreds of virtual peers; tests/protocol/test_admission_many.py)."""

    one: Callable[[InboundMessage], None]
    many: Callable[[list[tuple[Any, list[InboundMessage]]]], None]
    receiver: Any

    def __call__(self, message: InboundMessage) -> None:
        self.one(message)


RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
"""(requesting peer id, request bytes) -> response bytes, for the direct request/response protocol."""


class NetworkPort(Protocol):
    @property
    def local_peer_id(self) -> str: ...

    async def publish(self, topic: str, data: bytes) -> None:
        """Best-effort gossip to every subscriber of `topic`."""
        ...

    async def subscribe(self, topic: str) -> Any:
        """Returns a trio ReceiveChannel of InboundMessage for `topic`."""
        ...

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        """Hand each inbound message on `topic` to the synchronous `handler` at delivery time
        and return True, or return False (the transport cannot) and the caller uses
        `subscribe`. The simulator's in-memory network can: a channel hand-over per message
        (a send, a receive, a task wake-up) is its biggest cost at 100 peers."""
        ...

    @property
    def bounds_waits(self) -> bool:
        """True when `request` and `dht_get` always end by their own timeout (the simulator's
        network): the caller then needs no cancel scope of its own around them."""
        ...

    @property
    def push_max_bytes(self) -> int:
        """The largest batch envelope worth pushing inside its gossip announcement
        (swarmp2p/pushed.py): one message to every peer instead of a stream from each.
        0: never push (every peer fetches). Receiving pushes needs nothing from the port."""
        ...

    def set_gossip_priority(self, established: Callable[[str], bool]) -> None:
        """Say which senders' gossip a full inbound queue keeps (`established(sender)` true)
        when it must drop some: a flood from fresh keys then cannot push out announcements of
        peers this one has taken batches from. A transport without such a queue ignores it."""
        ...

    def set_request_handler(self, handler: RequestHandler) -> None:
        """Serve direct requests from other peers (rollout batch fetches)."""
        ...

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        """Send one request to `peer_id` over a direct stream and return its response.
        Raises `NetworkError` on timeout, unknown peer, or transport failure."""
        ...

    async def dht_put(self, key: str, value: bytes) -> None: ...

    async def dht_get(self, key: str) -> bytes | None: ...

    def connected_peers(self) -> Sequence[str]: ...


class NetworkError(Exception):
    """A network operation failed (timeout, unreachable peer, closed stream)."""


class ProtocolRefused(NetworkError):
    """The peer is reachable but does not serve the protocol asked for (not a swarmp2p node,
    or another version): asking again will not help."""


@attrs.frozen
class RoundInfo:
    """What the coordinator says now: the current round and stage and when the stage ends."""

    round: int
    stage: int
    stage_count: int
    stage_ends_ms: int
    stage_ms: int = 0
    """How long a stage lasts, as the coordinator publishes it (the contract's stageDuration);
    0 when it publishes none."""


class CoordinatorPort(Protocol):
    """The round clock. What only a chain coordinator has (its status, submission health,
    leaderboard) is not part of the port: node_setup.choose_coordinator hands the chain
    coordinator itself to the node alongside."""

    async def current(self) -> RoundInfo: ...

    async def register(self, peer_id: str) -> None:
        """Claim `peer_id` for this node. Already registered by us is fine."""
        ...

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None: ...

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None: ...


class CoordinatorError(Exception):
    """A coordinator call failed; `reason` says why (revert reason or transport error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PolicyPort(Protocol):
    """The trainer as the node sees it. Synchronous: the node calls it from one worker thread."""

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        """G completions per question, each scored by the local task registry."""
        ...

    def generate_items(self, items: Sequence[StageItem]) -> list[QuestionGroup]:
        """G completions per item of a later stage of a multi-stage game (protocol.stage_inputs
        .StageItem: its wire question `ref`, the original question, what it shows), each scored
        by the item's own `score`, the prompt worded by its game's registry row. Only called when
        the swarm's game has such stages; a policy without it cannot play them."""
        ...

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        """One GRPO update on local + external groups. Returns metrics (loss, reward, ...)."""
        ...

    def save(self) -> None: ...

    def load(self) -> bool:
        """Restore the newest valid checkpoint. Returns False when there is none."""
        ...

    def evaluate(self) -> dict[str, Any]:
        """Answer the fixed held-out set once per question. Returns {step, accuracy, reward,
        questions, per_task: {task: {accuracy, reward, n}}, samples: [{task, index, completion,
        reference, correct, reward}], seconds} (+ `simulated: True` from the simulated learner)."""
        ...

    @property
    def cancellable(self) -> bool:
        """True when `cancel()` stops a running call at its next step (the trainer, in a worker
        thread that a cancel scope cannot interrupt). False: `cancel` and `reset_cancel` are
        no-ops (the simulated learner: a cancel scope ends its virtual compute time)."""
        ...

    def cancel(self) -> None:
        """Ask the running (or next) call to stop at its next step (a node's stop, an evaluation
        past its deadline)."""
        ...

    def reset_cancel(self) -> None:
        """Undo `cancel()`: the next call runs."""
        ...


Waker = Callable[[], None]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch (virtual in the simulator)."""
        ...

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Waker], None]) -> None:
        """Sleep up to `seconds`, or less: `set_waker` is called first with a callable that
        ends the sleep early (a no-op once it has ended). The round loop's idle wait."""
        ...


async def trio_sleep_wakeable(seconds: float, set_waker: Callable[[Waker], None]) -> None:
    """`Clock.sleep_wakeable` on trio's clock (real time, or MockClock's virtual time): an
    Event in a cancel scope."""
    import trio  # local: the port declarations import no runtime

    woken = trio.Event()
    set_waker(woken.set)
    with trio.move_on_after(seconds):
        await woken.wait()
