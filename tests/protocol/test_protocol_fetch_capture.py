"""Fetch scheduling that unknown keys cannot capture: any number of throwaway keys
announcing this round or the next one before an established peer does never costs that peer
its fetch. Established: a history of valid batches, or connected to us when the round opened.

Pure: the admission inbox with real signed announcements; no trio, no network, no clock.
"""

from __future__ import annotations

import hashlib
from functools import cache

from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import AdmissionRules, Fetch, Hold, Inbox, Reject
from protocol.envelope import peer_id_from_seed, seal
from protocol.game import SingleStageGame
from protocol.messages import RolloutAnnouncement
from protocol.rounds import RoundMachine, RoundOpened
from protocol.scoring import PeerScores
from tests.helpers.inbox import EchoRegistry

SWARM = "cap"
SEED = 3
ROUND = 5
MAX_FETCH = 24
POOL = 3 * MAX_FETCH  # sybil keys per round: enough to fill every budget several times over
GAME = SingleStageGame(seed=SEED, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())


def key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


ME, HONEST = key("me"), key("honest")


def announcement(signer: bytes, round_number: int) -> tuple[str, bytes]:
    peer = peer_id_from_seed(signer)
    body = RolloutAnnouncement(SWARM, round_number, 0, peer, key(f"{peer}{round_number}"), 2, 900)
    return peer, seal(body, signer)


@cache
def sybils(round_number: int) -> tuple[tuple[str, bytes], ...]:
    return tuple(announcement(key(f"sybil{i}"), round_number) for i in range(POOL))


def make_inbox(how_known: str) -> Inbox:
    machine = RoundMachine()
    machine.handle(0, RoundOpened(ROUND, collect_until_ms=1000, round_ends_ms=2000))
    inbox = Inbox(
        AdmissionRules(swarm_id=SWARM, me=peer_id_from_seed(ME), seed=SEED, max_fetch_per_round=MAX_FETCH),
        machine,
        GAME,
        scores=PeerScores(),
    )
    honest = peer_id_from_seed(HONEST)
    if how_known == "history":
        inbox.scores.record_valid(honest)
    else:
        inbox.peers_connected([honest])
    inbox.open_round(ROUND, 0, connected=1)
    return inbox


def take(inbox: Inbox, decision: object) -> object:
    if isinstance(decision, Fetch):
        inbox.queued(decision.job)  # what the runtime does with every Fetch it queues
    return decision


def flood(inbox: Inbox, order: list[tuple[int, int]]) -> None:
    for round_number, index in order:
        take(inbox, inbox.heard(*sybils(round_number)[index]))


sybil_orders = st.lists(
    st.tuples(st.sampled_from((ROUND, ROUND + 1)), st.integers(0, POOL - 1)), max_size=4 * POOL
)


@given(sybil_orders, st.sampled_from(("history", "connected")))
def test_the_established_peers_batch_is_fetched_whatever_unknown_keys_announce_first(
    order: list[tuple[int, int]], how_known: str
) -> None:
    inbox = make_inbox(how_known)
    flood(inbox, order)
    assert isinstance(take(inbox, inbox.heard(*announcement(HONEST, ROUND))), Fetch)

    # The next round opens: the sybils' held announcements are released, then more arrive.
    inbox.machine.handle(2000, RoundOpened(ROUND + 1, collect_until_ms=3000, round_ends_ms=4000))
    inbox.open_round(ROUND + 1, 0, connected=1)
    for decision in inbox.release_early(ROUND + 1):
        take(inbox, decision)
    flood(inbox, [(ROUND + 1, index) for _, index in order])
    assert isinstance(take(inbox, inbox.heard(*announcement(HONEST, ROUND + 1))), Fetch)

    # Unknown keys never held more than their share of either round's budget.
    assert inbox.current is not None and inbox.current.unknown_fetches <= inbox.unknown_fetch_limit


def test_unknown_keys_are_held_to_their_share_and_future_round_allowance_with_counters() -> None:
    inbox = make_inbox("history")
    held = [inbox.heard(*sybil) for sybil in sybils(ROUND + 1)]
    allowance = inbox.rules.max_early_unknown
    assert held[:allowance] == [Hold(ROUND + 1)] * allowance
    assert set(held[allowance:]) == {Reject("future_round_limit", None)}
    assert inbox.rejections["future_round_limit"] == POOL - allowance

    fetched = [take(inbox, inbox.heard(*sybil)) for sybil in sybils(ROUND)]
    share = inbox.unknown_fetch_limit
    assert 1 <= share < MAX_FETCH
    assert sum(isinstance(d, Fetch) for d in fetched) == share
    assert inbox.rejections["fetch_unknown_limit"] == POOL - share
    # The established peer's batch still has the rest of the budget.
    assert isinstance(take(inbox, inbox.heard(*announcement(HONEST, ROUND))), Fetch)
    assert inbox.fetch_lane(peer_id_from_seed(HONEST)) < inbox.fetch_lane(sybils(ROUND)[0][0])
