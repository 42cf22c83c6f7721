"""A peer knob carried by several settings classes has one default (swarmp2p/peer_knobs.py): the
node's [node] config, the simulator's Scenario and the experiment start where PeerSettings does;
PeerSettings carries into the core's AdmissionRules and RoundTiming every field they share."""

from __future__ import annotations

import attrs
import pytest

from protocol.admission import AdmissionRules
from protocol.rounds import RoundTiming
from simulator.experiment import ExperimentSettings
from simulator.scenario import Scenario
from swarmp2p import peer_knobs
from swarmp2p.node_config import NodeConfig
from swarmp2p.peer_settings import PeerSettings, admission_rules, round_timing

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
    "COLLECT_FRACTION": ("collect_fraction", {Scenario: "collect_fraction", RoundTiming: "collect_fraction"}),
    "FETCH_TIMEOUT_S": ("fetch_timeout_s", {NodeConfig: "fetch_timeout_s"}),
    "MIN_ROUND_REMAINING": (
        "min_round_remaining",
        {NodeConfig: "join_min_remaining", RoundTiming: "min_round_remaining"},
    ),
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


def test_the_core_gets_every_knob_peer_settings_shares_with_it() -> None:
    changed = {
        "max_announce_bytes": 999, "max_batch_bytes": 99_999, "max_duplicates_per_round": 7,
        "max_fetch_per_round": 33, "fetch_sample": 5, "ban_on_proof": False, "known_peer_rounds": 4,
        "collect_fraction": 0.7, "sweep_fraction": 0.25, "min_round_remaining": 0.1, "dht_sweep": False,
    }
    settings = PeerSettings(swarm_id="s", seed=9, tasks=("t",), **changed)
    rules, timing = admission_rules(settings, "me"), round_timing(settings)
    for core in (rules, timing):
        shared = set(attrs.fields_dict(type(core))) & set(attrs.fields_dict(PeerSettings))
        carried = {name: getattr(core, name) for name in shared}
        assert carried == {name: getattr(settings, name) for name in shared}
    assert (rules.me, rules.swarm_id, rules.seed) == ("me", "s", 9)
    assert set(changed) <= set(attrs.fields_dict(AdmissionRules)) | set(attrs.fields_dict(RoundTiming))


def test_peer_settings_start_from_the_cores_defaults() -> None:
    settings = PeerSettings(swarm_id="s", seed=9, tasks=("t",))
    assert admission_rules(settings, "me") == AdmissionRules(swarm_id="s", me="me", seed=9)
    assert round_timing(settings) == RoundTiming()
