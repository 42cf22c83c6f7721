"""Per-peer reputation: how many valid and invalid messages each peer has sent.

A peer is banned once its invalid count reaches `ban_threshold` (a later valid batch does not
launder earlier forgeries). The runtime ignores banned peers' messages without decoding them
further. Counts by reason feed the dashboard's rejection counters.

The table is bounded: fresh keys cost an attacker nothing, so an entry per peer ever seen would
grow for as long as the swarm runs. `new_round` forgets a peer not heard from (no message
recorded) for `forget_after_rounds` rounds, or for `ban_rounds` if it has strikes or a ban: a ban
lasts `ban_rounds` after the peer's last recorded message, and a peer that comes back after that
starts over (three invalid messages, or one proof of lying, ban it again). The table therefore
holds at most the peers heard in the last `ban_rounds` rounds.
"""

from __future__ import annotations

from collections import Counter

import attrs

DEFAULT_BAN_THRESHOLD = 3
# A peer that was only ever valid and fell silent this long is a stranger again; connected
# peers stay established through the runtime's connection list whatever this says.
DEFAULT_FORGET_AFTER_ROUNDS = 100
DEFAULT_BAN_ROUNDS = 1000


@attrs.define
class PeerScores:
    ban_threshold: int = attrs.field(default=DEFAULT_BAN_THRESHOLD)
    forget_after_rounds: int = attrs.field(default=DEFAULT_FORGET_AFTER_ROUNDS)
    ban_rounds: int = attrs.field(default=DEFAULT_BAN_ROUNDS)
    valid: Counter[str] = attrs.field(factory=Counter)
    invalid: Counter[str] = attrs.field(factory=Counter)
    reasons: Counter[str] = attrs.field(factory=Counter)
    """Invalid messages by reason, over all peers."""
    reasons_by_peer: dict[str, Counter[str]] = attrs.field(factory=dict)
    banned: set[str] = attrs.field(factory=set)
    ban_reasons: dict[str, str] = attrs.field(factory=dict)
    """Why each peer was banned: the reason of the invalid message that tipped it over, or the
    reason given to `ban`."""
    last_heard: dict[str, int] = attrs.field(factory=dict)
    """The round of each remembered peer's last recorded message."""
    round: int = 0

    @ban_threshold.validator
    @forget_after_rounds.validator
    @ban_rounds.validator
    def _positive(self, attribute: attrs.Attribute, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")

    def new_round(self, round_number: int) -> None:
        """The swarm reached `round_number`: forget the peers silent for long enough (see the
        module docstring). One pass over the table, once per round."""
        self.round = round_number
        for peer, heard in list(self.last_heard.items()):
            silent = round_number - heard
            if silent < self.forget_after_rounds:
                continue
            if silent < self.ban_rounds and (peer in self.banned or self.invalid.get(peer, 0) > 0):
                continue
            self._forget(peer)

    def _forget(self, peer: str) -> None:
        del self.last_heard[peer]
        self.valid.pop(peer, None)
        self.invalid.pop(peer, None)
        self.reasons_by_peer.pop(peer, None)
        self.banned.discard(peer)
        self.ban_reasons.pop(peer, None)

    def record_valid(self, peer: str) -> None:
        self.valid[peer] += 1
        self.last_heard[peer] = self.round

    def record_invalid(self, peer: str, reason: str) -> bool:
        """Count one invalid message from `peer`. Returns True if this call banned the peer."""
        self.last_heard[peer] = self.round
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
        self.last_heard[peer] = self.round
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
