"""A sampled-out announcement's `Defer` decision is the very entry kept for top-ups."""

from __future__ import annotations

from protocol.admission import Defer, fetch_priority
from tests.helpers.inbox import ALICE, BOB, ME, ROUND, announce, batch_envelope, make_inbox, pid


def test_a_defer_is_the_deferred_entry_with_sender_and_priority() -> None:
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(ROUND, 0, connected=1000)  # fetch probability 0.001: almost all deferred
    seen = 0
    for k in (ALICE, BOB):
        decision = inbox.heard(pid(k), announce(k, batch_envelope(k)))
        if not isinstance(decision, Defer):
            continue
        seen += 1
        assert inbox.current is not None
        entry = inbox.current.deferred[pid(k)]
        assert entry is decision
        priority, announcement = entry
        assert decision.sender == pid(k) == announcement.peer_id == decision.announcement.peer_id
        assert decision.priority == priority == fetch_priority(inbox.rules.seed, ROUND, pid(ME), pid(k))
        assert decision == Defer(priority, announcement)
        assert repr(decision) == f"Defer(sender={pid(k)!r}, priority={priority!r})"
    assert seen
