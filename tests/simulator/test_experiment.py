"""`swarmp2p experiment sharing`: a short experiment runs end to end and writes its table, plots
and settings; every configuration's updates receive the same number of rollouts (counted inside
TrainerPolicy.train, not read from settings); a seed reproduces a run exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from typer.testing import CliRunner

from simulator.experiment import ExperimentError, ExperimentSettings, run_experiment, run_job
from simulator.experiment_report import write_outputs
from swarmp2p.cli import app

# A small, fast trainer: one short-answer task, a 2-layer 64-wide tiny model, short completions.
SMALL_TRAINER = (
    ("tasks", ("basic_arithmetic",)),
    ("tiny_hidden_size", 64),
    ("tiny_layers", 2),
    ("max_new_tokens", 12),
    ("tiny_pretrain_steps", 0),  # a raw build (seconds), formatted by the supervised warm-up below
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny-model cache for the file: each size is built once (tokenizer training and all)."""
    return tmp_path_factory.mktemp("models")


def small(models: Path, **changes: Any) -> ExperimentSettings:
    options: dict[str, Any] = {
        "peers": 3,
        "rounds": 2,
        "splits": ((2, 0), (1, 1)),
        "variants": (),
        "seeds": (1,),
        "questions_per_round": 6,
        "group_size": 4,
        "eval_every": 1,
        "eval_questions": 4,
        "warmup_steps": 30,
        "trainer": SMALL_TRAINER,
        "models_dir": str(models),
        "jobs": 1,
    }
    return ExperimentSettings(**(options | changes))


def test_a_short_experiment_runs_end_to_end_with_equal_rollouts_per_update(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.policy import TrainerPolicy

    received: list[tuple[int, int]] = []  # (groups, completions) per call, as the trainer got them
    original = TrainerPolicy.train

    def spy(self: TrainerPolicy, groups: Any) -> dict[str, float]:
        received.append((len(groups), sum(len(group.completions) for group in groups)))
        return original(self, groups)

    monkeypatch.setattr(TrainerPolicy, "train", spy)
    settings = small(models)
    ends: list[tuple[str, int]] = []  # (arm, calls received when its job ended): jobs=1 runs in order
    rounds_seen: list[tuple[str, int, int]] = []
    jobs = run_experiment(
        settings,
        tmp_path / "out",
        on_round=lambda *event: rounds_seen.append(event),
        on_job=lambda job: ends.append((job["arm"], len(received))),
    )
    written = write_outputs(settings, jobs, tmp_path / "out", "swarmp2p experiment sharing --test")

    # Every update of every configuration received L + E = 2 groups of G = 4 completions.
    per_arm: dict[str, list[tuple[int, int]]] = {}
    start = 0
    for arm, end in ends:
        per_arm[arm] = received[start:end]
        start = end
    assert set(per_arm) == {"2/0", "1/1"}
    for arm, calls in per_arm.items():
        assert len(calls) == settings.peers * settings.rounds, arm
        assert set(calls) == {(2, 8)}, arm
    # ...split as configured (from the Peer's records of what it passed to train()).
    by_arm = {job["arm"]: job for job in jobs}
    for peer in by_arm["2/0"]["peers"]:
        assert peer["trained_local"] == [2, 2] and peer["trained_external"] == [0, 0]
    for peer in by_arm["1/1"]["peers"]:
        assert peer["trained_local"] == [1, 1] and peer["trained_external"] == [1, 1]
        assert [tuple(u[:2]) for u in peer["updates"]] == [(2, 8), (2, 8)]

    # Evaluations: before training, after every round (eval_every 1).
    for job in jobs:
        for peer in job["peers"]:
            assert [e["round"] for e in peer["evals"]] == [-1, 0, 1]
            assert all(0.0 <= e["accuracy"] <= 1.0 for e in peer["evals"])
    assert sorted(rounds_seen) == sorted((arm, 1, r) for arm in ("2/0", "1/1") for r in range(2))

    out = tmp_path / "out"
    assert {path.name for path in written} >= {
        "table.md",
        "table.json",
        "reward.png",
        "accuracy.png",
        "settings.json",
    }
    for name in ("reward.png", "accuracy.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = json.loads((out / "table.json").read_text())
    assert [row["configuration"] for row in table["rows"]] == ["2/0", "1/1"]
    assert table["rows"][1]["groups_per_update"]["min"] == table["rows"][1]["groups_per_update"]["max"] == 2
    assert table["rows"][0]["ratio_to_first_split"] == pytest.approx(1.0)
    assert "| 1/1 |" in (out / "table.md").read_text()
    rerun = json.loads((out / "settings.json").read_text())
    assert rerun["command"] == "swarmp2p experiment sharing --test"
    assert rerun["seeds"] == [1] and rerun["trainer_config"]["tasks"] == ["basic_arithmetic"]
    assert not (out / "work").exists()  # the per-job scratch space is cleaned up


def test_a_seed_reproduces_rewards_and_accuracies(tmp_path: Path, models: Path) -> None:
    settings = small(models, peers=3, rounds=2)
    [arm] = [a for a in settings.arms() if a.name == "1/1"]

    def numbers(seed: int, where: str) -> list[Any]:
        job = run_job(settings, arm, seed, tmp_path / where)
        return [(p["peer_id"], p["rewards"], p["evals"], p["updates"]) for p in job["peers"]]

    first = numbers(1, "a")
    assert numbers(1, "b") == first
    assert numbers(2, "c") != first


def test_parallel_jobs_give_the_same_numbers_as_sequential_ones(tmp_path: Path) -> None:
    # The simulated learner: cheap, and the same job code path in worker processes.
    settings = ExperimentSettings(
        policy="sim",
        peers=6,
        rounds=3,
        splits=((4, 0), (2, 2)),
        variants=("filtered",),
        seeds=(1, 2),
        eval_every=1,
    )

    def strip(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Everything but the times (wall and CPU seconds differ between any two runs)."""
        kept = []
        for job in jobs:
            job = {k: v for k, v in job.items() if k not in ("wall_s", "cpu_s")}
            job["peers"] = [{k: v for k, v in p.items() if k != "generate_cpu_s"} for p in job["peers"]]
            kept.append(job)
        return kept

    sequential = run_experiment(settings, tmp_path / "one")
    parallel = run_experiment(attrs.evolve(settings, jobs=2), tmp_path / "two")
    assert strip(parallel) == strip(sequential)


def test_cli_runs_the_simulated_learner_and_writes_everything(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = CliRunner().invoke(
        app,
        [
            "experiment",
            "sharing",
            "--policy",
            "sim",
            "--peers",
            "6",
            "--rounds",
            "3",
            "--seeds",
            "2",
            "--splits",
            "4/0,2/2",
            "--variants",
            "verified-only,unverified,adaptive",
            "--forgers",
            "1",
            "--eval-every",
            "1",
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    table = json.loads((out / "table.json").read_text())
    rows = {row["configuration"]: row for row in table["rows"]}
    assert list(rows) == ["4/0", "2/2", "verified-only", "unverified", "adaptive"]
    assert rows["verified-only"]["honest_peers"] == rows["unverified"]["honest_peers"] == 5
    assert rows["verified-only"]["invalid_trained"] == 0 < rows["unverified"]["invalid_trained"]
    assert rows["adaptive"]["baseline"] == "2/2"
    settings = json.loads((out / "settings.json").read_text())
    assert settings["command"].startswith("swarmp2p") and settings["seeds"] == [1, 2]
    for name in ("table.md", "reward.png", "accuracy.png"):
        assert (out / name).exists()
    page = (out / "dashboard.html").read_text()  # the dashboard page with the table inlined
    assert "<script" in page and "verified-only" in page and 'src="http' not in page  # offline


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"splits": ((8, 0), (4, 2))}, "same number of groups"),
        ({"variants": ("greedy",)}, "unknown variant"),
        ({"policy": "gpt"}, "policy"),
        ({"hetero": True, "policy": "sim"}, "hetero"),
    ],
)
def test_bad_settings_are_one_line_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ExperimentError, match=message):
        ExperimentSettings(**changes)


def test_a_hetero_swarm_runs_two_model_sizes_and_reports_each(tmp_path: Path, models: Path) -> None:
    settings = small(models, peers=4, rounds=1, hetero=True, large=(("tiny_hidden_size", 96),))
    jobs = run_experiment(settings, tmp_path / "out")
    write_outputs(settings, jobs, tmp_path / "out", "swarmp2p experiment sharing --hetero")
    for job in jobs:  # odd peers run the larger model
        assert {p["index"]: p["size"] for p in job["peers"]} == {0: "base", 1: "large", 2: "base", 3: "large"}
    builds = {
        json.loads((b / "config.json").read_text())["hidden_size"]
        for b in models.iterdir()
        if not b.name.startswith(".")  # the build locks
    }
    assert builds == {64, 96}
    table = json.loads((tmp_path / "out" / "table.json").read_text())
    assert [(row["configuration"], row["size"], row["honest_peers"]) for row in table["rows"]] == [
        ("2/0", "base", 2),
        ("2/0", "large", 2),
        ("1/1", "base", 2),
        ("1/1", "large", 2),
    ]
    assert set(table["curves"]) == {"2/0 [base]", "2/0 [large]", "1/1 [base]", "1/1 [large]"}


def test_settings_rows_carry_intervals_and_paired_differences(tmp_path: Path, models: Path) -> None:
    """Two settings, two seeds: every row's held-out gain has a 95% interval, every split is
    compared with the first on the same seeds, and the compute-matched arm that shares generates
    fewer questions of its own; the ratio-one row trains with no off-policy correction while the
    split it is compared with corrects external groups."""
    from simulator.experiment_report import write_settings_table

    runs = []
    for name in ("identical", "compute-matched"):
        settings = small(
            models, setting=name, seeds=(1, 2), variants=("ratio-one",) if name == "identical" else ()
        )
        folder = tmp_path / name
        jobs = run_experiment(settings, folder)
        write_outputs(settings, jobs, folder, "swarmp2p experiment sharing --test")
        runs.append((settings, folder))
        rows = {row["configuration"]: row for row in json.loads((folder / "table.json").read_text())["rows"]}
        for row in rows.values():
            gain = row["heldout_gain"]
            assert gain is not None and gain["low"] <= gain["mean"] <= gain["high"], row["configuration"]
            assert row["groups_used_per_update"]["n"] > 0
        assert rows["2/0"]["vs_first_split"] is None
        versus = rows["1/1"]["vs_first_split"]
        assert (
            versus["gain_difference"]["low"]
            <= versus["gain_difference"]["mean"]
            <= versus["gain_difference"]["high"]
        )
        assert versus["reward_difference"]["n"] == 2  # paired over the two seeds
        if name == "compute-matched":
            assert rows["2/0"]["questions_per_round"] == 6 and rows["1/1"]["questions_per_round"] == 3
        else:
            assert all(row["questions_per_round"] == 6 for row in rows.values())
            by_arm = {job["arm"]: job for job in jobs}
            assert sum(p["corrected_groups"] for p in by_arm["1/1"]["peers"]) > 0
            assert sum(p["corrected_groups"] for p in by_arm["ratio-one"]["peers"]) == 0
    table = write_settings_table(runs, tmp_path)
    text = table.read_text()
    assert "| identical | 1/1 |" in text and "| compute-matched | 1/1 |" in text
    assert "[" in text.split("| compute-matched | 1/1 |")[1].split("\n")[0]  # an interval printed


def test_specialised_peers_answer_one_task_each_and_verify_each_other() -> None:
    """A specialised swarm: each peer's questions come from one task (a pure function of its id,
    so every verifier derives the same), and together the peers cover every task."""
    from protocol.game import SingleStageGame
    from protocol.questions import specialty
    from simulator.registry import SimTaskRegistry

    tasks = ("t1", "t2", "t3")
    game = SingleStageGame(
        seed=5, tasks=tasks, questions_per_round=4, registry=SimTaskRegistry(tasks), specialised=True
    )
    peers = [f"peer-{i}" for i in range(12)]
    for peer in peers:
        for round_number in range(5):
            assert {q.task for q in game.questions(round_number, 0, peer)} == {specialty(tasks, peer)}
    assert {specialty(tasks, peer) for peer in peers} == set(tasks)
    mixed = attrs.evolve(game, specialised=False)
    assert len({q.task for r in range(5) for q in mixed.questions(r, 0, peers[0])}) > 1


def test_off_specialty_gain_reads_only_the_tasks_a_peer_never_answers() -> None:
    """In a specialised swarm a peer's gain on its own task says nothing about sharing; the
    off-specialty gain averages, per held-out question, only the peers of the other tasks."""
    from protocol.questions import specialty
    from simulator.experiment_report import _off_specialty_gains

    tasks = ("t1", "t2")
    settings = ExperimentSettings(setting="specialised", eval_questions=2, trainer=(("tasks", tasks),))
    ids = [f"peer-{i}" for i in range(40)]
    one = next(p for p in ids if specialty(tasks, p) == "t1")
    two = next(p for p in ids if specialty(tasks, p) == "t2")
    # questions 0-1 are t1's, 2-3 t2's; each peer gains 1.0 on its own task only, 0.5 elsewhere
    peers = [
        {
            "peer_id": one,
            "evals": [
                {"round": -1, "per_question": [0.0] * 4},
                {"round": 9, "per_question": [1, 1, 0.5, 0.5]},
            ],
        },
        {
            "peer_id": two,
            "evals": [
                {"round": -1, "per_question": [0.0] * 4},
                {"round": 9, "per_question": [0.5, 0.5, 1, 1]},
            ],
        },
    ]
    assert _off_specialty_gains(peers, settings) == [0.5, 0.5, 0.5, 0.5]
    assert _off_specialty_gains(peers[:1], settings) is None  # t1's questions have no other peer
