"""The simulator's fast delivery path: the common case of the admission rules decided for a
run of gossip messages that reach one receiver at one simulated instant.

At 1000 simulated peers a gossip message reaches ~1000 inboxes and a virtual round is a million
deliveries, nearly all of them a sender's first announcement of the round that the receiver
defers (samples out). `heard_run` decides those in one tight loop (in C where _hot_loops.c is
built) on the simulator's numbered per-sender lists (protocol/sender_map.py) and shared opens
(shared_open.py); anything else it hands back as SLOW for `Inbox.heard` itself. The rules are
not written here a second time as rules: tests/simulator/test_fastpath_rules.py runs both this
loop (C and Python) and `Inbox.heard` + `consider` on random message streams and requires the
same decision for every message, so a rule changed on one side alone fails it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from protocol.admission import Inbox
from protocol.decisions import Defer, Fetch, _new_tuple, job_for
from protocol.deferred import DeferredStore
from protocol.envelope import Opened
from protocol.fetch_draw import sender_suffix
from protocol.messages import RolloutAnnouncement
from protocol.rounds import COLLECTING_PHASES
from protocol.sender_map import SenderMap, SenderRounds
from simulator.fastpath.peer_sets import PeersExcept
from simulator.fastpath.shared_open import SharedOpen

try:  # heard_run's inner loop in C, built by `pip install` where a compiler is found
    from simulator.fastpath._hot_loops import run as _compiled_heard_run
except ImportError:  # pragma: no cover - the Python loop below is the same loop
    _compiled_heard_run = None

__all__ = ["SLOW", "FastOpener", "Item", "heard_run"]

Item = tuple[str, bytes, SharedOpen | None]
"""(transport sender, data, the message's shared open; None for a pushed batch)."""

SLOW = object()
"""`heard_run`: not the common case, nothing changed; take the usual path (`Inbox.heard`)."""


class FastOpener(Protocol):
    """What the fast path asks of an inbox's opener beyond `protocol.admission.Opener`
    (swarmp2p.peer_cache.VerifyCache has both)."""

    def open(self, data: bytes, *, max_size: int | None = None) -> Opened: ...

    def reopened(self, data: bytes, times: int, *, max_size: int | None = None) -> None:
        """Do to the opener's own state what `times` more `open(data, max_size=...)` calls, right
        after one, would have done (their outcome is already known: shared_open.py)."""
        ...

    def peek_opened(self, data: bytes) -> Opened | None:
        """The opened envelope `open(data)` would answer from memory without opening `data`
        again, or None (nothing remembered, or `open` would raise). Changes and counts nothing:
        `heard_run` peeks, and calls `open` only once it has decided."""
        ...


_NO_JOINED: dict[str, int] = {}
"""heard_run's join index for a `connected` that is not a PeersExcept (its count is 0)."""


class _Slow(Exception):
    """Inside `heard_run`: the receiver is not collecting now, or keeps dicts (a node's Inbox):
    its items take the usual path."""


def _announcement_facts(outcome: object, sender: str) -> tuple[Any, ...] | bool:
    """What `heard_run` needs of an opened gossip message, the same for all its receivers:
    False unless it is an announcement signed by its transport sender, else (announcement,
    round, stage, swarm id, size, batch digest, the sender's part of the fetch draw)."""
    if type(outcome) is not Opened or outcome.signer != sender:
        return False
    announcement = outcome.message
    if type(announcement) is not RolloutAnnouncement:
        return False
    return (
        announcement,
        announcement.round,
        announcement.stage,
        announcement.swarm_id,
        announcement.size_bytes,
        announcement.batch_digest,
        sender_suffix(sender),
    )


def heard_run(inbox: Inbox, items: Sequence[Item]) -> Iterator[tuple[int, object]]:
    """`inbox.heard(sender, data, shared)` for each `(sender, data, shared)` of `items` in order (the
    gossip messages that reach this receiver at one instant), with the common case decided
    here: a sender's first, well-formed announcement for the current round while we collect,
    within the fetch budget (and, for a sender not established, within the unknown budget).
    Yields `(index, SLOW)` for any other case, having changed nothing (the caller runs the
    usual path, `heard` included, before the loop goes on), `(index, Fetch)` for a fetch to
    carry out and `(index, exception)` if deciding failed; a sampled-out (deferred) delivery
    yields nothing. The decisions and state are exactly `heard`'s: the same checks in the same
    order, only without the rejecting branches and the calls between them
    (tests/simulator/test_fastpath_rules.py holds every decision to `heard`'s on random streams).

    Why a run of messages for one receiver: at 1000 simulated peers this runs a million
    times per virtual round and nearly every delivery is a deferral. Taken message by message
    across receivers, each delivery reaches into a dozen objects of another peer that are no
    longer in the CPU's cache; here they are looked up once per run and stay warm.

    Why unknown senders only while the unknown budget has room: once it is full, the fetcher
    refreshes `connected` before `heard` for an unknown sender (the usual path does that);
    before, it does nothing else for them. Unknown senders are common in round 0, when each
    peer's connected set is the peers that came online before it.

    The first receiver of a message at an instant has no SharedOpen entry yet: when the
    opener remembers the envelope (`Opener.peek_opened`: an earlier instant opened it), the
    item is decided here and, once decided, opened as `heard` opens it (a memo hit);
    otherwise it yields SLOW and the usual path opens it.

    The inner loop runs in C when _hot_loops.c is built (`pip install` builds it): the same
    checks in the same order on the same objects; the Python loop below is the fallback (the
    rules property runs both).

    Only an Inbox given a `PeerNumbers` (the simulator's) takes this path: it reads and writes
    `known` and `announced` as list slots by sender number. With a node's dicts every item
    yields SLOW."""
    deferred_count = 0
    index = -1
    compiled = _compiled_heard_run  # None where it was not built: the Python loop below
    while index + 1 < len(items):
        start = index + 1  # the first item, or the one after the item last yielded
        index = start  # what an error before the loop is reported for
        outcome: object = None
        try:
            # The receiver's state, read again after each yield: the caller's usual path
            # may have changed it (a ban, a fetch queued, a hold, the connected peers).
            state = inbox.current
            current, stage = inbox.machine.current_position()
            if state is None or state.round != current or inbox.machine.phase not in COLLECTING_PHASES:
                raise _Slow
            rules = inbox.rules
            me = rules.me
            swarm_id = rules.swarm_id
            max_announce = rules.max_announce_bytes
            max_batch = rules.max_batch_bytes
            max_fetch = rules.max_fetch_per_round
            banned = inbox.scores.banned
            valid = inbox.scores.valid
            connected = inbox.connected
            if type(connected) is PeersExcept:
                # Its membership inline (`sender == me` is decided first, below).
                connected_base, join_index, joined_count = connected.membership_parts()
            else:
                connected_base, join_index, joined_count = connected, _NO_JOINED, 0
            opener = inbox.opener
            opener_key = id(opener)
            known = inbox.known
            announced = state.announced
            if (
                type(known) is not SenderRounds
                or type(announced) is not SenderMap
                or known.numbers is not announced.numbers
            ):
                raise _Slow  # a node's dicts: this path is for the simulator's numbered maps
            number_of = known.numbers.number.get
            known_slots = known.slots
            announced_slots = announced.slots
            numbered = min(len(known_slots), len(announced_slots))  # senders with slots
            stage_count = inbox.game.stage_count
            ahead = stage + 1 if stage + 1 < stage_count else -1  # the next stage, if any
            state_stage = state.stage
            # Nothing in the loop below changes `state.fetches`: a Fetch ends it.
            fetches_full = state.fetches >= max_fetch
            # Fetcher.announced refreshes `connected` for an unknown sender when this is
            # true; nothing here changes it before the loop breaks (on a Fetch, or SLOW).
            unknown_budget_full = inbox.unknown_budget_full()
            probability = state.fetch_probability
            deferred = state.deferred
            draw = inbox.fetch_draw(state) if probability < 1.0 else None
            if compiled is not None and type(items) is list:
                # The same loop in C (_hot_loops.c), when it is built.
                index, kind, value, deferred_now = compiled(
                    items, start, me, banned, max_announce, opener_key, _announcement_facts,
                    known.numbers.number, swarm_id, current, ahead, state_stage, numbered,
                    announced_slots, known_slots, max_batch, fetches_full, connected_base,
                    join_index, joined_count, valid, unknown_budget_full, probability,
                    None if draw is None else draw.prefix, deferred, Defer,
                    deferred.fast_offer_parts() if type(deferred) is DeferredStore else None, opener,
                )  # fmt: skip
                deferred_count += deferred_now
                if kind == 1:
                    outcome = SLOW
                elif kind == 2:
                    announcement, unknown = value
                    if unknown:
                        state.unknown_fetches += 1
                    outcome = Fetch(job_for(announcement))
                elif kind == 3:
                    outcome = value  # deciding this item raised: reported as below
            else:
                for index in range(start, len(items)):  # read after the loop
                    sender, data, shared = items[index]
                    if (
                        shared is None  # a pushed batch: the usual path unwraps it
                        or sender == me
                        or sender in banned
                        or len(data) > max_announce
                    ):
                        outcome = SLOW
                        break
                    entry = shared.by_opener.get(opener_key)  # SharedOpen.peek, inlined
                    if entry is None:
                        # The first receiver with this opener at this instant: when the opener
                        # remembers the envelope (an earlier instant opened it), decided here
                        # and opened below; otherwise the usual path opens it.
                        peeked = opener.peek_opened(data)
                        if peeked is None:
                            outcome = SLOW
                            break
                        facts = _announcement_facts(peeked, sender)
                    else:
                        facts = entry[4]
                        if facts is None:
                            facts = entry[4] = _announcement_facts(entry[1], sender)
                    if facts is False:
                        outcome = SLOW  # an error outcome, another kind or a relayed message
                        break
                    announcement, a_round, a_stage, a_swarm, a_size, a_digest, _ = facts
                    number = number_of(sender)
                    if (
                        a_swarm != swarm_id
                        or a_round != current
                        or a_stage == ahead
                        or a_stage != state_stage
                        or number is None  # not numbered yet, or its slots are not there yet:
                        or number >= numbered  # the usual path numbers it and grows the lists
                        or announced_slots[number] is not None  # `sender in announced`
                        or a_size > max_batch
                        or fetches_full
                    ):
                        outcome = SLOW
                        break
                    unknown = not (  # not established: `sender in connected or valid.get(...) > 0`
                        sender in connected_base
                        or (joined_count and join_index.get(sender, joined_count) < joined_count)
                        or valid.get(sender, 0) > 0
                    )
                    if unknown and unknown_budget_full:
                        outcome = SLOW  # the usual path refreshes `connected` first
                        break
                    # Decided: from here on, what `heard` -> `consider` does.
                    if entry is None:
                        shared.open(opener, max_announce)  # as `heard` opens: a memo hit
                        shared.by_opener[opener_key][4] = facts
                    else:
                        entry[3] += 1  # the open we would have made (SharedOpen.settle accounts it)
                    announced_slots[number] = a_digest
                    known_slots[number] = current
                    if draw is not None:
                        priority = draw(sender)
                        if priority >= probability:
                            if priority <= deferred.cutoff:
                                deferred.offer(_new_tuple(Defer, (priority, announcement)))
                            deferred_count += 1
                            continue
                    if unknown:
                        state.unknown_fetches += 1
                    outcome = Fetch(job_for(announcement))
                    break
                else:
                    index = len(items)
        except _Slow:  # not collecting this round now: each item on the usual path
            outcome = SLOW
        except Exception as error:  # a bug: reported for this delivery, the rest go on
            outcome = error
        if deferred_count:
            inbox.counters["fetch_deferred"] += deferred_count
            deferred_count = 0
        if outcome is not None:
            yield index, outcome
