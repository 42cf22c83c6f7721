"""What a real-time swarm test may assert about rounds on any machine, busy or idle.

A user is promised that every round is accounted for: it has a record with its fate (completed,
reported late, trained with the report late, abandoned, skipped), counted and printed, never lost
silently. A user is not promised that every round completes: on a host with other work a round's
generate + train can overrun it. So these helpers check the fates of every round in a window, and
that training on other peers happens within the window, not in each of its rounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from swarmp2p.round_record import FATES

TRAINED = frozenset({"completed", "reported_late", "trained_report_late"})
"""Fates of rounds whose training step ran (and so took in other peers' rollouts)."""


def fates_accounted_for(records: Mapping[int, Mapping[str, Any]], rounds: Iterable[int], who: object) -> None:
    """Every round in `rounds` has a record and its fate is one a user can read."""
    for number in rounds:
        assert number in records, f"{who}: round {number} has no record (lost silently)"
        fate = records[number].get("fate")
        assert fate in FATES, f"{who}: round {number} has no known fate: {records[number]}"


def trained_records(
    records: Mapping[int, Mapping[str, Any]], rounds: Iterable[int]
) -> list[Mapping[str, Any]]:
    """The records in `rounds` whose training step ran."""
    return [records[n] for n in rounds if n in records and records[n].get("fate") in TRAINED]


def peers_trained_on(records: Mapping[int, Mapping[str, Any]], rounds: Iterable[int]) -> set[str]:
    """Every peer whose rollouts went into a training step in `rounds`."""
    return {
        peer for record in trained_records(records, rounds) for peer in record["external_peers_trained_on"]
    }
