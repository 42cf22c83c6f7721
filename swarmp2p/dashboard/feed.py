"""The rollout feed's entries for one round: a few of the question groups a peer generated and
verified, small enough to keep in every round record (rounds.jsonl) and in a simulator's memory.

`round_rollouts(round, me, local, external, rejected)` is the hook for the round's record (the
peer calls it where it builds its `RoundRecord`): one local group, then up to `per_peer` groups of
each accepted peer, then rejected batches, each completion cut to `max_chars`. The dashboard shows
the entries under "Rollout feed" (swarmp2p/dashboard/view.py reads `history[*].rollouts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_CHARS = 160
MAX_COMPLETIONS = 4
MAX_ENTRIES = 6


def group_entry(group: Any, peer_id: str, verdict: str, *, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """One question group (protocol.messages.QuestionGroup or its dict) as a feed entry."""
    question = getattr(group, "question", None)
    if question is None and isinstance(group, Mapping):
        question = group.get("question")
    completions = getattr(group, "completions", None)
    if completions is None and isinstance(group, Mapping):
        completions = group.get("completions") or ()

    def field(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    return {
        "peer_id": peer_id,
        "task": field(question, "task"),
        "index": field(question, "index"),
        "completions": [
            {"text": str(field(c, "text") or "")[:max_chars], "reward": field(c, "reward")}
            for c in list(completions)[:MAX_COMPLETIONS]
        ],
        "verdict": verdict,
    }


def round_rollouts(
    me: str,
    local: Sequence[Any],
    external: Mapping[str, Iterable[Any]],
    rejected: Iterable[tuple[str, str]] = (),
    *,
    per_peer: int = 1,
    max_entries: int = MAX_ENTRIES,
) -> list[dict[str, Any]]:
    """Feed entries for one round: `local` groups (ours), `external` {peer: groups verified},
    `rejected` (peer, reason) of batches dropped. Bounded: at most `max_entries` entries."""
    entries = [group_entry(group, me, "local") for group in list(local)[:1]]
    for peer in sorted(external):
        entries += [group_entry(group, peer, "verified") for group in list(external[peer])[:per_peer]]
    for peer, reason in rejected:
        entry = {"peer_id": peer, "task": None, "index": None, "completions": [], "verdict": "rejected"}
        entries.append({**entry, "reason": reason})
    return entries[:max_entries]


class RolloutFeed:
    """The node's live rollout feed: `observe(work, me)` reads the round in progress (the peer's
    `RoundWork`: its local groups, the batches its inbox verified) each time the dashboard asks
    for a status, and keeps the newest `limit` entries across rounds. Reading is defensive: a
    work object of another shape gives no new entries, never an error."""

    def __init__(self, limit: int = 24, reward_rounds: int = 10, max_peers: int = 1000) -> None:
        self.limit = limit
        self.reward_rounds = reward_rounds
        self.max_peers = max_peers
        self._entries: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._rewards: dict[str, dict[int, float]] = {}  # peer -> round -> verified batch reward

    def peer_rewards(self) -> dict[str, float]:
        """Each other peer's mean verified batch reward over the last rounds seen: what this node
        ranks winners by (round_steps.report), for the leaderboard."""
        return {peer: sum(rounds.values()) / len(rounds) for peer, rounds in self._rewards.items() if rounds}

    def _note_rewards(self, round_number: int, rewards: dict[str, float]) -> None:
        for peer, reward in rewards.items():
            if peer not in self._rewards and len(self._rewards) >= self.max_peers:
                continue
            rounds = self._rewards.setdefault(str(peer), {})
            rounds[round_number] = float(reward)
            for old in sorted(rounds)[: max(0, len(rounds) - self.reward_rounds)]:
                del rounds[old]

    def observe(self, work: Any, me: str) -> list[dict[str, Any]]:
        try:
            round_number = int(work.round)
            inbox = getattr(work, "inbox", None)
            external = dict(getattr(inbox, "external", None) or {})
            self._note_rewards(round_number, dict(getattr(inbox, "external_reward", None) or {}))
            for entry in round_rollouts(me, list(getattr(work, "local", None) or ()), external):
                entry["round"] = round_number
                key = (round_number, entry["peer_id"], entry["task"], entry["index"])
                self._entries.setdefault(key, entry)
        except Exception:  # no round yet (None), or a RoundWork of another shape
            pass
        if len(self._entries) > self.limit:
            for key in sorted(self._entries, key=lambda k: k[0])[: len(self._entries) - self.limit]:
                del self._entries[key]
        return sorted(self._entries.values(), key=lambda e: -e["round"])


def peer_faults(peer: Any) -> dict[str, int]:
    """Messages blamed on each other peer (the peer's `PeerScores.invalid`: forged rewards,
    malformed or oversized batches, ...), the contribution table's "rejected"; {} when the peer
    keeps no scores."""
    invalid = getattr(getattr(peer, "scores", None), "invalid", None)
    try:
        return {str(sender): int(count) for sender, count in dict(invalid or {}).items()}
    except (TypeError, ValueError):
        return {}
