"""A peer knob carried by several settings classes has one default (swarmp2p/peer_knobs.py): the
node's [node] config, the simulator's Scenario and the experiment start where PeerSettings does."""

from __future__ import annotations

import attrs
import pytest

from simulator.experiment import ExperimentSettings
from simulator.scenario import Scenario
from swarmp2p import peer_knobs
from swarmp2p.node_config import NodeConfig
from swarmp2p.peer_settings import PeerSettings

# knob: (its PeerSettings field, {class: its field there})
SHARED = {
    "QUESTIONS_PER_ROUND": (
        "questions_per_round",
        {NodeConfig: "questions_per_round", Scenario: "questions_per_round"},
    ),
    "N_LOCAL": ("n_local", {NodeConfig: "n_local", Scenario: "n_local"}),
    "N_EXTERNAL": ("n_external", {NodeConfig: "n_external", Scenario: "n_external"}),
    "MAX_GROUPS_PER_PEER": (
        "max_groups_per_peer",
        {
            NodeConfig: "max_groups_per_peer",
            Scenario: "max_groups_per_peer",
            ExperimentSettings: "max_groups_per_peer",
        },
    ),
    "COLLECT_FRACTION": ("collect_fraction", {Scenario: "collect_fraction"}),
    "FETCH_TIMEOUT_S": ("fetch_timeout_s", {NodeConfig: "fetch_timeout_s"}),
    "MIN_ROUND_REMAINING": ("min_round_remaining", {NodeConfig: "join_min_remaining"}),
}


def default_of(cls: type, field: str) -> object:
    return attrs.fields_dict(cls)[field].default


@pytest.mark.parametrize("knob", sorted(SHARED))
def test_every_class_carrying_a_knob_starts_from_its_one_default(knob: str) -> None:
    value = getattr(peer_knobs, knob)
    peer_field, carriers = SHARED[knob]
    assert default_of(PeerSettings, peer_field) == value
    assert {cls.__name__: default_of(cls, field) for cls, field in carriers.items()} == {
        cls.__name__: value for cls in carriers
    }


def test_every_knob_of_the_module_is_checked() -> None:
    assert {name for name in vars(peer_knobs) if name.isupper()} == set(SHARED)
