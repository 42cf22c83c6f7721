"""Byzantine virtual peers: they speak the wire format, but lie.

"forge" is not here: a forger runs the ordinary `Peer` with `simulator.policy.ForgingPolicy`
(honest code, dishonest rewards), because that is the realistic attack. The kinds here send what
no `Peer` would ever send, straight through their network port:

- malformed:   random bytes and truncated envelopes on the announce topic
- oversized:   announcements far over the size cap
- replay:      re-publishes other peers' signed announcements from earlier rounds as its own traffic
- impersonate: announcements naming a victim as author, signed with the attacker's own key
- flood:       one announcement re-sent over and over (more echoes than a peer tolerates: a
               flood), then many distinct self-signed ones per round (equivocation), and a
               fetch handler that serves bytes that do not match the announced digest
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

import msgpack
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocol import codec
from protocol.envelope import ENVELOPE_KIND, SIGNING_DOMAIN, public_key_from_seed, seal
from protocol.messages import PROTOCOL_VERSION, FetchResponse, RolloutAnnouncement
from swarmp2p.ports import InboundMessage, NetworkError, NetworkPort

# Identical re-announcements per round: more than PeerSettings.max_duplicates_per_round (4) + 1.
FLOOD_REPEATS = 8


def forged_envelope(message: RolloutAnnouncement, seed: bytes) -> bytes:
    """Sign `message` with `seed` although its peer_id names someone else.

    `protocol.envelope.seal` refuses to do this, so the attacker builds the frame by hand."""
    inner = codec.encode(message)
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return msgpack.packb(
        {
            "v": PROTOCOL_VERSION,
            "k": ENVELOPE_KIND,
            "m": inner,
            "pk": public_key_from_seed(seed),
            "sig": key.sign(SIGNING_DOMAIN + inner),
        },
        use_bin_type=True,
    )


class Adversary:
    def __init__(
        self,
        kind: str,
        seed: bytes,
        network: NetworkPort,
        *,
        swarm_id: str,
        topic: str,
        round_ms: int,
        genesis_ms: int,
        now_ms: Callable[[], int],
        rng: random.Random,
        victims: list[str],
    ) -> None:
        self.kind = kind
        self.seed = seed
        self.network = network
        self.peer_id = network.local_peer_id
        self.swarm_id = swarm_id
        self.topic = topic
        self.round_ms = round_ms
        self.genesis_ms = genesis_ms
        self.now_ms = now_ms
        self.rng = rng
        self.victims = victims
        self.seen: list[tuple[int, bytes]] = []  # (round, announcement envelope) of honest peers
        self.sent = 0

    async def run(self) -> None:
        channel = await self.network.subscribe(self.topic)
        self.network.set_request_handler(self._serve)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._listen, channel)
            while True:
                now = self.now_ms()
                current = max(0, (now - self.genesis_ms) // self.round_ms)
                # Strike a few seconds into the round, when honest announcements are flowing.
                strike_at = self.genesis_ms + current * self.round_ms + self.round_ms // 10
                if strike_at <= now:
                    strike_at += self.round_ms
                    current += 1
                await trio.sleep((strike_at - now) / 1000)
                try:
                    await self._attack(current)
                except NetworkError:
                    pass

    async def _listen(self, channel: trio.MemoryReceiveChannel[InboundMessage]) -> None:
        async for message in channel:
            if self.kind == "replay" and len(self.seen) < 256:
                round_number = max(0, (self.now_ms() - self.genesis_ms) // self.round_ms)
                self.seen.append((round_number, message.data))

    async def _publish(self, data: bytes) -> None:
        self.sent += 1
        await self.network.publish(self.topic, data)

    async def _attack(self, round_number: int) -> None:
        rng = self.rng
        if self.kind == "malformed":
            await self._publish(rng.randbytes(rng.randrange(1, 400)))
            valid = seal(self._announcement(round_number), self.seed)
            await self._publish(valid[: rng.randrange(1, len(valid))])
        elif self.kind == "oversized":
            await self._publish(rng.randbytes(64 * 1024))
        elif self.kind == "replay":
            old = [data for seen_round, data in self.seen if seen_round < round_number]
            for data in old[-3:]:
                await self._publish(data)
            self.seen = [(r, d) for r, d in self.seen if r >= round_number - 1]
        elif self.kind == "impersonate":
            victim = self.victims[rng.randrange(len(self.victims))]
            announcement = self._announcement(round_number, peer_id=victim)
            await self._publish(forged_envelope(announcement, self.seed))
        elif self.kind == "flood":
            repeated = seal(self._announcement(round_number), self.seed)
            for _ in range(FLOOD_REPEATS):
                await self._publish(repeated)
            for _ in range(20):
                await self._publish(seal(self._announcement(round_number), self.seed))

    def _announcement(self, round_number: int, *, peer_id: str | None = None) -> RolloutAnnouncement:
        return RolloutAnnouncement(
            swarm_id=self.swarm_id,
            round=round_number,
            stage=0,
            peer_id=peer_id or self.peer_id,
            batch_digest=hashlib.sha256(self.rng.randbytes(16)).digest(),
            group_count=4,
            size_bytes=1000,
        )

    async def _serve(self, requester: str, data: bytes) -> bytes:
        # Serve something that can never match the announced digest.
        return codec.encode(FetchResponse(found=True, envelope=self.rng.randbytes(200)))
