"""The simulator's compiled loops (simulator/fastpath/_hot_loops.c) against the same loops in
Python: `heard_run`'s inner loop and the items it takes.

tests/simulator/test_fastpath_many.py checks that the simulator's many-receiver path decides
what the per-delivery path does; with the extension built, that path runs the C loops. Here the
same checks run with both in Python (where no compiler is found), the extension is required to
be built (the README's install builds it, and a missing compiler would otherwise quietly make
a 1000-peer round ~1.5x dearer), and an error inside the C loop is reported for its item, as
the Python loop reports it. tests/simulator/test_fastpath_rules.py holds both loops to the
admission rules decision by decision.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace
from typing import Any

import pytest

import simulator.fastpath.heard_run as fast
from protocol.admission import PlainOpener
from protocol.decisions import Defer
from protocol.deferred import DeferredStore
from protocol.fetch_draw import FetchDraw, sender_suffix
from simulator.fastpath import delivery
from simulator.fastpath.shared_open import SharedOpen
from tests.simulator import test_fastpath_many as test_admission_many


def test_the_compiled_loop_is_built() -> None:
    assert fast._compiled_heard_run is not None and delivery._compiled_items is not None, (
        "simulator.fastpath._hot_loops is not built: `pip install -e .` needs a C compiler and "
        "OpenSSL's headers (libssl-dev)"
    )


@pytest.fixture
def python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast, "_compiled_heard_run", None)
    monkeypatch.setattr(delivery, "_compiled_items", None)


def test_the_python_loop_decides_what_the_per_delivery_path_does(python_loop: None) -> None:
    test_admission_many.test_the_many_path_decides_what_the_per_delivery_path_does()


def test_the_python_loop_takes_the_fast_path_too(python_loop: None) -> None:
    test_admission_many.test_numbered_inboxes_take_the_fast_path_and_dicts_do_not()
    test_admission_many.test_unknown_senders_take_the_fast_path_while_their_budget_has_room()


def test_both_loops_yield_the_same_outcomes_for_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def outcomes() -> list[object]:
        found = test_admission_many._fast_path_outcomes(test_admission_many.SENDERS, (), fetch_sample=2)
        return [_outcome_key(outcome) for outcome in found]

    compiled = outcomes()
    monkeypatch.setattr(fast, "_compiled_heard_run", None)
    python = outcomes()
    assert compiled == python and compiled  # some fetched, some deferred at 2 of 6


def _outcome_key(outcome: object) -> object:
    job = getattr(outcome, "job", None)
    return (type(outcome).__name__, job.sender, job.digest) if job is not None else outcome


class _Shared:
    def __init__(self, entry: list[Any]) -> None:
        self.by_opener = {1: entry}


class _Deferred:
    cutoff = 2.0

    def __init__(self) -> None:
        self.offered: list[Defer] = []

    def offer(self, entry: Defer) -> None:
        self.offered.append(entry)


def _run(items: list[Any], facts_of: Any, probability: float = 1.0, deferred: Any = None) -> tuple[Any, ...]:
    run = fast._compiled_heard_run
    assert run is not None
    deferred = _Deferred() if deferred is None else deferred
    parts = deferred.fast_offer_parts() if isinstance(deferred, DeferredStore) else None
    result = run(
        items, 0, "me", set(), 1000, 1, facts_of, {"a": 0, "b": 1}, "swarm", 3, -1, 0, 2,
        [None, None], array("i", [-1, -1]), 10_000, False, frozenset({"a", "b"}), {}, 0, {},
        False, probability, DRAW.prefix, deferred, Defer, parts, PlainOpener(),
    )  # fmt: skip
    return (*result, deferred)


DRAW = FetchDraw(7, 3, "me")


def _item(sender: str) -> tuple[str, bytes, _Shared]:
    # [opener, outcome, max_size, opens answered from the memo, facts]: SharedOpen's entry
    return (sender, b"data", _Shared([None, "opened", 0, 0, None]))


def _facts(sender: str) -> tuple[Any, ...]:
    suffix = sender_suffix(sender)
    return (f"announcement of {sender}", 3, 0, "swarm", 10, b"digest-" + sender.encode(), suffix)


def test_the_compiled_loop_reports_an_error_for_its_item_and_counts_the_deferrals_before_it() -> None:
    def facts_of(outcome: object, sender: str) -> object:
        if sender == "b":
            raise RuntimeError("cannot read this outcome")
        return _facts(sender)

    items = [_item("a"), _item("b")]
    index, kind, value, deferred_count, deferred = _run(items, facts_of, probability=0.0)
    assert (index, kind, deferred_count) == (1, 3, 1)
    assert isinstance(value, RuntimeError) and str(value) == "cannot read this outcome"
    # The first item was deferred: kept for a top-up (below the cutoff), as a Defer.
    assert [type(entry) for entry in deferred.offered] == [Defer]
    assert deferred.offered[0][1] == "announcement of a"


def test_the_compiled_loop_decides_a_fetch_and_stops_there() -> None:
    items = [_item("a"), _item("b")]
    index, kind, value, deferred_count, _ = _run(items, lambda outcome, sender: _facts(sender))
    assert (index, kind, value, deferred_count) == (0, 2, ("announcement of a", False), 0)
    assert items[0][2].by_opener[1][3] == 1  # the open it stands in for, counted


def test_the_compiled_loop_leaves_a_relayed_message_to_the_usual_path() -> None:
    items = [_item("a")]
    index, kind, value, deferred_count, _ = _run(items, lambda outcome, sender: False)
    assert (index, kind, value, deferred_count) == (0, 1, None, 0)
    assert items[0][2].by_opener[1][3] == 0  # nothing changed for it


def test_the_compiled_loop_keeps_a_deferred_store_as_its_offer_does() -> None:
    senders = ["a", "b"]
    # announcements with a peer_id, which the store's readers use
    facts = {sender: (SimpleNamespace(peer_id=sender), *_facts(sender)[1:]) for sender in senders}
    stores = []
    for compiled in (True, False):
        store = DeferredStore(limit=1)  # trims at 2 offers: the higher one goes, the cutoff falls
        items = [_item(sender) for sender in senders]
        if compiled:
            _run(items, lambda outcome, sender: facts[sender], probability=0.0, deferred=store)
        else:  # the same priorities offered one by one
            for sender in senders:
                store.offer(Defer(DRAW(sender), facts[sender][0]))
        stores.append((list(store.items()), store.cutoff))
    assert stores[0] == stores[1]
    assert len(stores[0][0]) == 1 and stores[0][1] < 2.0  # trimmed to one, the cutoff lowered


@pytest.mark.parametrize("compiled", [True, False], ids=["c", "python"])
def test_an_envelope_opened_at_an_earlier_instant_is_decided_without_the_usual_path(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not compiled:
        monkeypatch.setattr(fast, "_compiled_heard_run", None)
    many = test_admission_many
    plan = {**many._PLAN, "connected": set(many.SENDERS), "max_fetch_per_round": 64}
    (first, second), _, cache = many._build([{**plan, "me": "r1"}, {**plan, "me": "r2"}], many.SENDERS)
    message = many.MESSAGES[many.COMMON[0]]
    # Instant 1: the first receiver opens the envelope on the usual path (nothing remembered).
    item = (message.transport_sender, message.data, SharedOpen(message.data))
    assert list(fast.heard_run(first.inbox, [item])) == [(0, fast.SLOW)]
    first.announced(*item)
    hits, misses = cache.hits, cache.misses
    # Instant 2, a new SharedOpen: the cache remembers the envelope, so it is decided in the run
    # and opened once, as the usual path would open it (a memo hit).
    shared = SharedOpen(message.data)
    outcomes = list(fast.heard_run(second.inbox, [(message.transport_sender, message.data, shared)]))
    assert len(outcomes) == 1 and type(outcomes[0][1]).__name__ == "Fetch"
    assert (cache.hits, cache.misses) == (hits + 1, misses)
    assert shared.by_opener[id(cache)][3] == 0  # its own open, not a repeat to settle
