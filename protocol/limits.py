"""Every size and range bound of the wire format, in one place.

The codec enforces these on BOTH encode and decode, so a peer never sends what another
peer would reject. Lengths of strings are counted in UTF-8 bytes (what the wire
carries), not characters. Changing a bound that makes previously valid messages invalid
is a wire-format change: bump PROTOCOL_VERSION.

Why these numbers:
- Peer ids are base58 multihashes (an Ed25519 id is 52 chars); 128 leaves room for other key types.
- A GRPO group rarely exceeds 16 completions and a round rarely exceeds 8 questions per peer;
  64 of each is generous yet bounds a batch's shape.
- A completion is at most a few hundred tokens for the small models this swarm trains;
  16 KiB of text is far above that. Its per-token sampling log-probabilities (float32 each,
  protocol/logprobs.py) are capped at 4096 tokens: 16 KiB, as much again as the text cap; a
  longer completion travels without them.
- A swarm's rules name at most 128 tasks (reasoning-gym has ~100 datasets); with 16 listen
  addresses at their cap that still keeps a hello under 16 KiB.
- A batch (<= 4 MiB) travels over a direct stream, never gossip (gossipsub silently drops
  messages over 1 MiB), so only announcements, hellos and votes go through gossip.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

MAX_UINT63 = 2**63 - 1
"""Largest int any counter, seed, index or timestamp may take (fits a signed 64-bit int)."""

# ---- strings (UTF-8 bytes) ---------------------------------------------------------------
MAX_PEER_ID_BYTES = 128
MAX_SWARM_ID_BYTES = 64
MAX_TASK_NAME_BYTES = 64
MAX_GAME_NAME_BYTES = 64
MAX_COMPLETION_TEXT_BYTES = 16 * KIB
MAX_MODEL_NAME_BYTES = 128
MAX_LISTEN_ADDR_BYTES = 256

# ---- tuples ------------------------------------------------------------------------------
MAX_GROUPS_PER_BATCH = 64
MAX_COMPLETIONS_PER_GROUP = 64
MAX_COMPLETION_TOKENS = 4096
"""Sampled tokens of one completion that may carry a log-prob (`Completion.logprobs`)."""
MAX_WINNERS = 32
"""Winners one vote may name: the contract's own bound (MAX_WINNERS in
swarmp2p/chain/contracts/SwarmCoordinator.vy; tests/chain/test_contract_constants.py holds them equal)."""
MAX_LISTEN_ADDRS = 16
MAX_SCHEDULE_TASKS = 128
"""Tasks in a swarm's rules (`SwarmSchedule.tasks`, and as many `weights`)."""

# ---- ints --------------------------------------------------------------------------------
MAX_STAGES = 16
"""A round has 1..MAX_STAGES stages; `stage` fields are in 0..MAX_STAGES-1."""

MIN_ROUND_MS = 1
MIN_DIFFICULTY = -1
"""-1: each reasoning-gym dataset's default configuration; >= 0: a curriculum level."""
MAX_DIFFICULTY = 1000

# ---- floats ------------------------------------------------------------------------------
MIN_REWARD = 0.0
MAX_REWARD = 1.0
MAX_TASK_WEIGHT = 1e6
"""Task weights are relative; any sane mix fits, and a bound keeps their sum finite."""

# ---- bytes -------------------------------------------------------------------------------
DIGEST_BYTES = 32  # sha256
ED25519_PUBLIC_KEY_BYTES = 32
ED25519_SIGNATURE_BYTES = 64

# ---- whole messages (encoded size in bytes) ------------------------------------------------
MAX_BATCH_BYTES = 4 * MIB
ENVELOPE_OVERHEAD_BYTES = 256
"""Envelope framing around the inner message: keys, version, 32-byte key, 64-byte signature."""

MAX_ENVELOPE_BYTES = MAX_BATCH_BYTES + ENVELOPE_OVERHEAD_BYTES
"""Largest sealed envelope (a sealed batch is the largest thing a peer signs)."""

MAX_PUSHED_ENVELOPE_BYTES = 512 * KIB
"""Largest batch envelope pushed inside its gossip announcement (PushedAnnouncement): gossip
RPCs over 1 MiB are dropped by py-libp2p, and every relay hop carries the whole batch."""

MAX_SEALED_ANNOUNCE_BYTES = 2 * KIB
"""A sealed announcement: the announce message plus envelope framing."""

MAX_MESSAGE_BYTES: dict[str, int] = {
    "hello": 16 * KIB,
    "announce": 1 * KIB,
    "batch": MAX_BATCH_BYTES,
    "fetch_req": 1 * KIB,
    "fetch_resp": MAX_ENVELOPE_BYTES + 1 * KIB,
    "pushed": MAX_PUSHED_ENVELOPE_BYTES + MAX_SEALED_ANNOUNCE_BYTES + 1 * KIB,
    "reward": 1 * KIB,
    "winners": 16 * KIB,
}
"""Cap on the encoded size of each message kind (the codec's top-level frame included)."""

MAX_ANY_MESSAGE_BYTES = max(MAX_MESSAGE_BYTES.values())
