"""Per-peer reputation: how many valid and invalid messages each peer has sent.

A peer is banned once its invalid count reaches `ban_threshold`, and stays banned for
the life of this table (a later valid batch does not launder earlier forgeries). The
runtime ignores banned peers' messages without decoding them further. Counts by reason
feed the dashboard's rejection counters.
"""

from __future__ import annotations

from collections import Counter

import attrs

DEFAULT_BAN_THRESHOLD = 3


@attrs.define
class PeerScores:
    ban_threshold: int = attrs.field(default=DEFAULT_BAN_THRESHOLD)
    valid: Counter[str] = attrs.field(factory=Counter)
    invalid: Counter[str] = attrs.field(factory=Counter)
    reasons: Counter[str] = attrs.field(factory=Counter)
    """Invalid messages by reason, over all peers."""
    reasons_by_peer: dict[str, Counter[str]] = attrs.field(factory=dict)
    banned: set[str] = attrs.field(factory=set)
    ban_reasons: dict[str, str] = attrs.field(factory=dict)
    """Why each peer was banned: the reason of the invalid message that tipped it over, or the
    reason given to `ban`."""

    @ban_threshold.validator
    def _positive(self, attribute: attrs.Attribute, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ban_threshold must be a positive int, got {value!r}")

    def record_valid(self, peer: str) -> None:
        self.valid[peer] += 1

    def record_invalid(self, peer: str, reason: str) -> bool:
        """Count one invalid message from `peer`. Returns True if this call banned the peer."""
        self.invalid[peer] += 1
        self.reasons[reason] += 1
        self.reasons_by_peer.setdefault(peer, Counter())[reason] += 1
        if peer not in self.banned and self.invalid[peer] >= self.ban_threshold:
            self.banned.add(peer)
            self.ban_reasons[peer] = reason
            return True
        return False

    def ban(self, peer: str, reason: str) -> bool:
        """Ban `peer` at once, whatever its count: for signed proof of lying (a forged reward,
        two batches for one round), which no honest peer can produce by accident. Returns True
        if this call banned the peer (False if it already was); the first reason is kept."""
        if peer in self.banned:
            return False
        self.banned.add(peer)
        self.ban_reasons[peer] = reason
        return True

    def is_banned(self, peer: str) -> bool:
        return peer in self.banned

    def summary(self) -> dict[str, dict[str, int]]:
        """Plain-dict snapshot for reports and metrics."""
        return {
            "valid": dict(self.valid),
            "invalid": dict(self.invalid),
            "reasons": dict(self.reasons),
            "banned": {peer: self.invalid[peer] for peer in sorted(self.banned)},
        }
