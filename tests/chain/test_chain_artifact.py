"""The committed contract artifact must be exactly what the committed source compiles to."""

from __future__ import annotations

import json

from swarmp2p.chain.artifact import ARTIFACT_PATH, SOURCE_PATH, artifact_json, compile_source, load_artifact


def test_committed_artifact_matches_a_fresh_compile() -> None:
    fresh = compile_source()
    committed = ARTIFACT_PATH.read_text()
    assert committed == artifact_json(fresh), "contract artifact drifted: run `swarmp2p chain compile`"
    assert load_artifact().bytecode == fresh.bytecode


def test_artifact_exposes_the_coordinator_interface() -> None:
    abi = json.loads(ARTIFACT_PATH.read_text())["abi"]
    functions = {entry["name"] for entry in abi if entry["type"] == "function"}
    events = {entry["name"] for entry in abi if entry["type"] == "event"}
    assert {
        "registerPeer",
        "currentRound",
        "currentStage",
        "stageCount",
        "updateStageAndRound",
        "addBootnodes",
        "removeBootnode",
        "getBootnodes",
        "submitReward",
        "submitWinners",
        "rewardLeaderboard",
        "winnerLeaderboard",
        "totalReward",
        "totalWins",
    } <= functions
    assert {
        "PeerRegistered",
        "StageAdvanced",
        "RewardSubmitted",
        "WinnersSubmitted",
        "BootnodesAdded",
    } <= events
    # Deployed code must fit the EIP-170 limit of 24576 bytes (the init code is a bit larger).
    assert len(bytes.fromhex(load_artifact().bytecode[2:])) < 24576 + 2000
    assert "pragma version 0.4.3" in SOURCE_PATH.read_text()
