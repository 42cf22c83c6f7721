"""`swarmp2p simulate` end to end, and the scenario loader's one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.scenario import MAX_TRAINER_PEERS, ScenarioError, builtin_scenarios, load_scenario
from swarmp2p.cli import app


def test_simulate_writes_a_reproducible_report_and_plots(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["simulate", "--peers", "6", "--rounds", "3", "--seed", "7", "--scenario", "byzantine10"]
    first = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, [*args, "--out", str(tmp_path / "b"), "--no-plots"])
    assert second.exit_code == 0, second.output
    data = (tmp_path / "a" / "report.json").read_bytes()
    assert data == (tmp_path / "b" / "report.json").read_bytes()
    report = json.loads(data)
    assert report["scenario"]["peers"] == 6 and len(report["rounds"]) == 3
    assert str(tmp_path) not in data.decode()
    for plot in ("reward.png", "traffic.png", "completion.png"):
        assert (tmp_path / "a" / plot).read_bytes().startswith(b"\x89PNG")
    assert "cumulative reward" in first.output


def test_simulate_bad_scenario_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("peers = 5\n[network]\nlatncy_ms = 3\n")
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(bad), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "network.latncy_ms: unknown key" in result.output


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("peers = 'ten'", "peers: expected int"),
        ("peers = 1", "peers"),
        ("[faults]\nchurn_leave = 2.0", "churn_leave"),
        ("[byzantine]\nkinds = ['nice']", "unknown ['nice']"),
        ("[[faults.partition]]\nstart_round = 5\nheal_round = 2", "heal_round"),
        ("peers = [", "invalid TOML"),
        ("policy = 'gpu'", "policy"),
        ("coordinator = 'ledger'", "coordinator"),
        ("policy = 'trainer'\npeers = 33", "at most 32 peers"),
        ("dht_sweep = 1", "dht_sweep: expected bool"),
        ("tasks = 'arithmetic'", "tasks: expected an array of strings"),
        ("[network]\ngossip_loss = 1.5", "gossip_loss"),
    ],
)
def test_scenario_errors_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(path)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_missing_file_and_builtins() -> None:
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario("/nonexistent/x.toml")
    assert builtin_scenarios() == ["baseline", "byzantine10", "churn30", "lossy", "partition"]
    for name in builtin_scenarios():
        scenario = load_scenario(name, rounds=2)
        assert scenario.name == name and scenario.rounds == 2


def test_simulate_trainer_policy_refuses_a_big_swarm_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["simulate", "--policy", "trainer", "--peers", str(MAX_TRAINER_PEERS + 1), "--out", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert f"at most {MAX_TRAINER_PEERS} peers" in result.output


def test_simulate_flags_set_the_scenario_keys(tmp_path: Path) -> None:
    args = ["simulate", "--peers", "4", "--rounds", "2", "--fetch-sample", "0", "--no-plots"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["scenario"]["fetch_sample"] == 0 and report["scenario"]["coordinator"] == "schedule"
    page = (tmp_path / "dashboard.html").read_text()  # the report inlined in the dashboard's page
    assert "<script" in page and report["scenario"]["name"] in page
    assert report["summary"]["coordinator_rewards_accepted"] == 8
    assert report["summary"]["coordinator_mismatches"] == 0


def test_simulate_error_keeps_bracketed_section_names(tmp_path: Path) -> None:
    # The one-line error is printed through rich: "[bad.network]" must not be eaten as markup.
    bad = tmp_path / "bad.toml"
    bad.write_text("network = 3\n")
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(bad), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "[bad.network] must be a table" in result.output


def test_simulate_draws_a_solo_baseline_beside_the_swarm(tmp_path: Path) -> None:
    """The same peers with no external groups (training alone) run beside the swarm: the report
    carries their mean reward per round, the summary both curves' last round."""
    args = ["simulate", "--peers", "6", "--rounds", "4", "--seed", "3", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    solo = report["solo"]
    assert solo["n_external"] == 0 and solo["n_local"] == report["scenario"]["n_local"]
    assert [row["round"] for row in solo["rounds"]] == [0, 1, 2, 3]
    assert all(isinstance(row["reward_mean"], float) for row in solo["rounds"])
    assert solo["rounds"] != [
        {"round": r["round"], "reward_mean": r["reward_mean"]} for r in report["rounds"]
    ]
    assert "solo" in result.output  # the summary's row
    off = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "off"), "--no-solo", "--no-plots"])
    assert off.exit_code == 0, off.output
    assert "solo" not in json.loads((tmp_path / "off" / "report.json").read_text())


def test_simulate_tensorboard_has_a_run_per_peer_and_the_swarm(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ["simulate", "--peers", "3", "--rounds", "3", "--no-plots", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--tensorboard", str(tmp_path / "tb")])
    assert result.exit_code == 0, result.output
    runs = sorted(path.name for path in (tmp_path / "tb").iterdir())
    # Three peers and the swarm, nothing else (no empty event file at the top, a run of its own).
    assert len(runs) == 4 and runs[-1] == "swarm" and all(run.startswith("peer-") for run in runs[:3]), runs
    swarm = EventAccumulator(str(tmp_path / "tb" / "swarm"))
    swarm.Reload()
    assert [event.step for event in swarm.Scalars("swarm/reward_mean")] == [0, 1, 2]
    assert [event.step for event in swarm.Scalars("solo/reward_mean")] == [0, 1, 2]
    peer = EventAccumulator(str(tmp_path / "tb" / next(run for run in runs if run.startswith("peer-"))))
    peer.Reload()
    assert [event.step for event in peer.Scalars("round/reward")] == [0, 1, 2]


def test_simulate_eval_every_puts_held_out_accuracy_in_the_report_and_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ["simulate", "--peers", "3", "--rounds", "4", "--no-plots", "--no-solo", "--eval-every", "2"]
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "out"), "--tensorboard", str(tmp_path / "tb")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    evaluated = [row["round"] for row in report["rounds"] if row.get("eval_accuracy_mean") is not None]
    assert evaluated, report["rounds"]
    assert all(
        0.0 <= row["eval_accuracy_mean"] <= 1.0 for row in report["rounds"] if row["round"] in evaluated
    )
    run = next(path for path in (tmp_path / "tb").iterdir() if path.name.startswith("peer-"))
    events = EventAccumulator(str(run))
    events.Reload()
    assert "eval/accuracy" in events.Tags()["scalars"], events.Tags()
    off = CliRunner().invoke(app, [*args[:-2], "--out", str(tmp_path / "off")])
    assert off.exit_code == 0, off.output
    assert "eval_accuracy_mean" not in json.loads((tmp_path / "off" / "report.json").read_text())["rounds"][0]
