"""The dashboard's model of a status (swarmp2p/dashboard/view.py), its sources (a data dir, a
simulation report, an experiment), friendly peer names, the rollout feed and the static report;
no browser here (tests/dashboard/test_dashboard_browser.py opens the page)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from protocol.messages import Completion, QuestionGroup, QuestionRef
from swarmp2p.dashboard import build_view, normalize_status, page_html, peer_name, write_html_report
from swarmp2p.dashboard.feed import round_rollouts
from swarmp2p.dashboard.names import ADJECTIVES, ANIMALS
from swarmp2p.dashboard.sources import data_dir_status, experiment_status, status_of_path

ME, ALICE, BOB = "12D3KooWme", "12D3KooWalice", "12D3KooWbob"


def test_peer_names_are_fixed_words_from_the_id() -> None:
    # Pinned: a name must read the same on every machine and after every upgrade.
    assert peer_name("12D3KooWa") == "clever-crimson-walrus"
    assert peer_name("12D3KooWa") == peer_name("12D3KooWa")
    assert len(set(ADJECTIVES)) == len(ADJECTIVES) and len(set(ANIMALS)) == len(ANIMALS)
    names = {peer_name(f"12D3KooW{i}") for i in range(1000)}
    assert len(names) > 990  # 64 * 63 * 64 names: a few collisions in 1000, no more


@given(st.text(max_size=60))
def test_a_peer_name_is_two_different_adjectives_and_an_animal(peer_id: str) -> None:
    first, second, animal = peer_name(peer_id).split("-")
    assert first in ADJECTIVES and second in ADJECTIVES and first != second
    assert animal in ANIMALS


def node_record(round_number: int, **extra) -> dict:
    return {
        "round": round_number,
        "peer_id": ME,
        "completed": True,
        "reward": 0.05 + 0.01 * round_number,
        "rollouts_in": 4,
        "rollouts_out": 2,
        "accepted_peers": [ALICE, BOB] if round_number % 2 else [ALICE],
        "external_peers_trained_on": [ALICE],
        "rejected": {"out_of_round": 20, "forged_reward": 7} if round_number == 3 else {},
        "train_metrics": {
            "loss": -0.01 * round_number,
            "kl": 0.001,
            "grad_norm": 2.0,
            "clip_fraction": 0.0,
            "completion_tokens": 300.0,
            "seconds": 1.5,
        },
        **extra,
    }


def test_view_of_a_node_status_has_every_section() -> None:
    history = [node_record(r) for r in range(1, 5)]
    history[-1]["rollouts"] = round_rollouts(
        ME,
        [QuestionGroup(QuestionRef("chain_sum", 1, 7), (Completion("<answer>3</answer>", 1.0),))],
        {BOB: [QuestionGroup(QuestionRef("leg_counting", 1, 2), (Completion("x" * 500, 0.0),))]},
        [(ALICE, "forged_reward")],
    )
    status = normalize_status(
        {
            "peer_id": ME,
            "round": 5,
            "peers": [ALICE, BOB],
            "history": history,
            "rejections": {"out_of_round": 20, "forged_reward": 9, "malformed": 1},
            "peer_rejections": {BOB: 3},
            "schedule": {"swarm_id": "abc", "genesis_ms": 1000, "round_ms": 8000, "stage_count": 1},
            "eval_history": [{"round": None, "accuracy": 0.1, "reward": 0.2}, {"round": 4, "accuracy": 0.3}],
        }
    )
    view = build_view(status)
    assert view["me"] == {"peer_id": ME, "name": peer_name(ME)} and view["swarm_id"] == "abc"
    assert view["schedule"] == {"genesis_ms": 1000, "round_ms": 8000, "stage_count": 1}
    # The reward series is the data, not a 0-1 frame; the before-training eval sits a round early.
    assert view["reward_series"][0]["points"] == [[r, 0.05 + 0.01 * r] for r in range(1, 5)]
    assert view["eval_series"][0]["points"] == [[0, 0.1], [4, 0.3]] and view["eval_start"] == 0
    # The rejected column shows the real count (a record's rejections are per reason).
    row3 = next(row for row in view["rounds"] if row["round"] == 3)
    assert row3["rejected"] == 27 and "out_of_round 20" in row3["reasons"]
    # By reason: the larger of the records' sum and the node's own counters, most first.
    assert view["rejections"] == [["out_of_round", 20], ["forged_reward", 9], ["malformed", 1]]
    contributions = {row["peer_id"]: row for row in view["contributions"]}
    assert contributions[ALICE]["accepted"] == 4 and contributions[ALICE]["sampled"] == 4
    assert contributions[BOB]["accepted"] == 2 and contributions[BOB]["sampled"] == 0
    assert contributions[BOB]["name"] == peer_name(BOB) and contributions[BOB]["connected"]
    assert contributions[BOB]["rejected"] == 3 and contributions[ALICE]["rejected"] == 0
    board = view["leaderboard"]
    assert board[0]["peer_id"] == ME and board[0]["rank"] == 1 and board[0]["rounds"] == 4
    assert {row["peer_id"] for row in board} == {ME, ALICE, BOB}
    train = {chart["key"]: chart["points"] for chart in view["train_series"]}
    assert set(train) == {"loss", "kl", "grad_norm", "clip_fraction", "tokens_per_s"}
    assert train["tokens_per_s"][0] == [1, 200.0]
    feed = view["feed"]
    assert [entry["verdict"] for entry in feed] == ["local", "verified", "rejected"]
    assert feed[0]["task"] == "chain_sum" and feed[0]["name"] == peer_name(ME)
    assert feed[1]["peer_id"] == BOB and len(feed[1]["completions"][0]["text"]) == 160
    assert feed[2]["reason"] == "forged_reward"
    json.dumps(view, allow_nan=False)


def test_a_data_dir_gives_its_whole_rounds_log_and_no_countdown_when_stopped(tmp_path: Path) -> None:
    with open(tmp_path / "rounds.jsonl", "w") as log:
        for r in range(150):  # more than a node keeps in memory (100)
            log.write(json.dumps(node_record(r)) + "\n")
        log.write('{"round": 150, "torn')  # the line a running node is writing
    (tmp_path / "swarm.json").write_text(json.dumps({"swarm_id": "s1", "genesis_ms": 1, "round_ms": 8000}))
    status = normalize_status(status_of_path(tmp_path))
    assert [row["round"] for row in status["history"]] == list(range(150))
    assert status["peer_id"] == ME and status["round"] == 149 and status["phase"] == "stopped"
    view = build_view(status)
    assert view["swarm_id"] == "s1" and view["schedule"] is None and view["rounds_recorded"] == 150
    # A node running on the dir without a dashboard of its own: the files, and the countdown.
    (tmp_path / "node.json").write_text(json.dumps({"peer_id": ME, "pid": 1}))
    running = normalize_status(status_of_path(tmp_path))
    assert running["phase"] == "running" and build_view(running)["schedule"]["round_ms"] == 8000
    # A running node's live status adds what the log lacks yet and keeps the countdown.
    live = data_dir_status(tmp_path, live={"peer_id": ME, "round": 151, "history": [node_record(150)]})
    assert [row["round"] for row in live["history"]][-2:] == [149, 150]
    assert build_view(normalize_status(live))["schedule"]["round_ms"] == 8000


def simulation_report(tmp_path: Path) -> Path:
    from swarmp2p.cli import app

    args = ["simulate", "--peers", "6", "--rounds", "4", "--seed", "7", "--scenario", "byzantine10"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "sim"), "--no-plots"])
    assert result.exit_code == 0, result.output
    return tmp_path / "sim" / "report.json"


def test_a_simulation_report_becomes_rounds_a_leaderboard_and_a_summary(tmp_path: Path) -> None:
    report = json.loads(simulation_report(tmp_path).read_text())
    status = normalize_status(status_of_path(tmp_path / "sim"))  # the directory works too
    view = build_view(status)
    assert status["round"] == 3 and status["phase"] == "finished" and status["peer_count"] == 6
    assert [p[0] for p in view["reward_series"][0]["points"]] == [0, 1, 2, 3]
    assert view["reward_series"][0]["band"], "min-max band of the honest peers"
    solo = view["reward_series"][1]  # the same peers alone, dashed beside the swarm's curve
    assert solo["label"].startswith("solo") and solo["dash"] is True
    assert solo["points"] == [[row["round"], row["reward_mean"]] for row in report["solo"]["rounds"]]
    assert {row["peer_id"] for row in view["leaderboard"]} == {p["peer_id"] for p in report["peers"]}
    assert all(row["name"] == peer_name(row["peer_id"]) for row in view["leaderboard"])
    assert view["rejections"] and all(count > 0 for _, count in view["rejections"])
    assert dict(view["summary"])["learner"].startswith("simulated learner")
    # Nothing shown raw: no Python or JSON dicts or lists in the summary.
    assert not any(re.search(r"[{\[]'|\{\"", value) for _, value in view["summary"]), view["summary"]
    assert view["contributions"] == [] and view["me"] is None


def test_an_experiment_dir_gives_one_curve_per_arm(tmp_path: Path) -> None:
    curves = {
        arm: {
            "reward": [{"round": r, "mean": 0.3 + 0.01 * r} for r in range(3)],
            "accuracy": [{"rounds_trained": r, "mean": 0.1 + 0.02 * r} for r in (0, 5)],
        }
        for arm in ("8/0", "4/4")
    }
    (tmp_path / "table.json").write_text(json.dumps({"curves": curves, "settings": {"peers": 8}, "rows": []}))
    jobs = [{"arm": "4/4", "seed": 1, "rejections": {"forged_reward": 3}, "peers": [
        {"peer_id": ALICE, "rewards": [0.1, 0.2, 0.3]}, {"peer_id": BOB, "rewards": [0.4]}]}]  # fmt: skip
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    view = build_view(normalize_status(experiment_status(tmp_path)))
    assert [s["label"] for s in view["reward_series"]] == ["4/4", "8/0"]
    assert view["eval_series"][0]["points"] == [[0, 0.1], [5, 0.1 + 0.02 * 5]]
    assert [row["peer_id"] for row in view["leaderboard"]] == [BOB, ALICE]
    assert view["rejections"] == [["forged_reward", 3]]
    # A big experiment (8 arms x 3 seeds x 8 peers) shows its top rows, and says so.
    jobs[0]["peers"] = [{"peer_id": f"12D3KooW{i}", "rewards": [i / 100]} for i in range(40)]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    view = build_view(normalize_status(experiment_status(tmp_path)))
    assert len(view["leaderboard"]) == 25 and "top 25 of 40" in view["leaderboard_note"]


def test_the_static_report_inlines_the_status_safely(tmp_path: Path) -> None:
    status = {"peer_id": "</script><script>alert(1)</script>", "round": 2, "history": [node_record(1)]}
    page = write_html_report(status, tmp_path / "report.html").read_text()
    inline = re.search(r'<script id="inline-status" type="application/json">(.*?)</script>', page, re.S)
    assert inline, "the status is inlined"
    data = json.loads(inline.group(1))
    assert data["peer_id"] == status["peer_id"] and data["view"]["rounds"][0]["round"] == 1
    assert "alert(1)</script>" not in page
    assert "null</script>" in page_html()  # the served page polls instead


def test_a_node_dashboard_with_its_rounds_log_shows_rounds_from_before_a_restart(tmp_path: Path) -> None:
    import trio

    from swarmp2p.dashboard import serve_dashboard

    log = tmp_path / "rounds.jsonl"
    log.write_text("".join(json.dumps(node_record(r)) + "\n" for r in range(120)))
    live = {"peer_id": ME, "round": 121, "history": [node_record(119), node_record(120)]}  # since the restart

    async def main() -> list[int]:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(lambda task_status: serve_dashboard(
                lambda: live, history_file=log, task_status=task_status))  # fmt: skip
            url = f"http://127.0.0.1:{port}/api/status"
            body = await trio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=10).read())
            nursery.cancel_scope.cancel()
        return [row["round"] for row in json.loads(body)["history"]]

    assert trio.run(main) == list(range(121))


def test_the_live_rollout_feed_keeps_the_newest_rounds_and_never_raises() -> None:
    from types import SimpleNamespace

    from swarmp2p.dashboard.feed import RolloutFeed

    def work(round_number: int) -> SimpleNamespace:
        local = [
            QuestionGroup(QuestionRef("chain_sum", 1, round_number), (Completion("<answer>3</answer>", 1.0),))
        ]
        external = {BOB: (QuestionGroup(QuestionRef("leg_counting", 1, 2), (Completion("4", 0.5),)),)}
        inbox = SimpleNamespace(external=external, external_reward={BOB: 0.1 * round_number})
        return SimpleNamespace(round=round_number, local=local, inbox=inbox)

    feed = RolloutFeed(limit=4)
    assert feed.observe(None, ME) == []  # before the first round
    assert feed.observe(object(), ME) == []  # a work object of another shape
    for round_number in range(5):
        entries = feed.observe(work(round_number), ME)
        entries = feed.observe(work(round_number), ME)  # asked twice in a round: no duplicates
    assert [(e["round"], e["verdict"]) for e in entries] == [
        (4, "local"),
        (4, "verified"),
        (3, "local"),
        (3, "verified"),
    ]
    # Others' rewards as verified here (what winners are ranked by): the leaderboard's.
    assert feed.peer_rewards() == {BOB: pytest.approx(0.2)}  # rounds 0-4
    status = {
        "peer_id": ME,
        "rollouts": entries,
        "peer_rewards": feed.peer_rewards(),
        "history": [node_record(1)],
    }
    view = build_view(normalize_status(status))
    assert view["feed"][1]["name"] == peer_name(BOB) and view["feed"][1]["completions"][0]["reward"] == 0.5
    board = {row["peer_id"]: row for row in view["leaderboard"]}
    assert board[BOB]["reward"] == pytest.approx(0.2) and board[BOB]["name"] == peer_name(BOB)
    assert [row["peer_id"] for row in view["leaderboard"]] == [BOB, ME, ALICE]  # 0.2 > 0.06 > unknown


def test_peer_faults_are_the_messages_blamed_on_each_peer() -> None:
    from types import SimpleNamespace

    from protocol.scoring import PeerScores
    from swarmp2p.dashboard.feed import peer_faults

    scores = PeerScores()
    scores.record_invalid(BOB, "forged_reward")
    scores.record_invalid(BOB, "malformed")
    scores.record_valid(ALICE)
    assert peer_faults(SimpleNamespace(scores=scores)) == {BOB: 2}
    assert peer_faults(object()) == {}


def test_the_rounds_log_is_read_incrementally_and_again_when_replaced(tmp_path: Path) -> None:
    from swarmp2p.dashboard.app import HistoryFile

    path = tmp_path / "rounds.jsonl"
    log = HistoryFile(path)
    assert log.rows() == []  # no log yet
    path.write_text(json.dumps({"round": 0}) + "\n" + '{"round": 1, "tor')
    assert [row["round"] for row in log.rows()] == [0]  # the torn line waits for its newline
    with open(path, "a") as handle:
        handle.write('n": 1}\n' + json.dumps({"round": 2}) + "\n")
    assert [row["round"] for row in log.rows()] == [0, 1, 2]
    replaced = tmp_path / "new.jsonl"
    replaced.write_text(json.dumps({"round": 7}) + "\n")
    replaced.replace(path)
    assert [row["round"] for row in log.rows()] == [7]


def test_a_simulation_report_with_evaluations_shows_the_held_out_accuracy(tmp_path: Path) -> None:
    from swarmp2p.cli import app

    args = ["simulate", "--peers", "3", "--rounds", "4", "--eval-every", "2", "--no-plots", "--no-solo"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "sim")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "sim" / "report.json").read_text())
    view = build_view(normalize_status(status_of_path(tmp_path / "sim")))
    [series] = view["eval_series"]
    assert series["points"] == [
        [row["round"], row["eval_accuracy_mean"]]
        for row in report["rounds"]
        if row["eval_accuracy_mean"] is not None
    ]
    assert series["points"], report["rounds"]
    status = normalize_status(status_of_path(tmp_path / "sim"))
    assert status["eval"]["accuracy"] == series["points"][-1][1]  # the header card's figure


def test_a_node_from_round_0_plots_its_start_point_at_0_on_an_axis_of_the_rounds_played() -> None:
    # The evaluation before training describes the weights round 0 starts with: at 0, "start",
    # on an axis from 0 to the rounds played; never at -1 on an axis padded from -2 to 0.
    history = [{"round": r, "completed": True, "reward": 0.2} for r in range(3)]
    start = [{"round": None, "accuracy": 0.21, "reward": 0.37}]
    start_only = normalize_status({"peer_id": "p", "history": history, "eval_history": start})
    view = build_view(start_only)
    assert view["eval_series"][0]["points"] == [[0, 0.21]] and view["eval_start"] == 0
    assert view["eval_range"] == [0, 2]
    # Sliced points come at the round of their newest weights; one after round 0's training
    # would share x 0 with the start: the start then keeps the round before.
    evals = [{"round": None, "accuracy": 0.2}, {"round": 0, "accuracy": 0.25}, {"round": 6, "accuracy": 0.3}]
    view = build_view(normalize_status({"peer_id": "p", "history": history, "eval_history": evals}))
    assert view["eval_series"][0]["points"] == [[-1, 0.2], [0, 0.25], [6, 0.3]] and view["eval_start"] == -1
    assert view["eval_range"] == [-1, 6]
    # A joiner's first round is 7: its start point is the weights after round 6.
    joiner = [{"round": r, "completed": True} for r in (7, 8)]
    view = build_view(normalize_status({"peer_id": "p", "history": joiner, "eval_history": evals[:1]}))
    assert view["eval_start"] == 6 and view["eval_range"] == [6, 8]
    assert build_view(normalize_status({"peer_id": "p", "history": history}))["eval_range"] is None
