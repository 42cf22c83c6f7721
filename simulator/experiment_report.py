"""The sharing experiment's results (simulator/experiment.py runs it): per-arm rows with gains and
95% intervals, paired comparisons against the first split, the training curves, and what an
experiment folder holds: table.md, table.json, jobs.json, reward.png / accuracy.png,
settings.json, and settings.md across settings (`write_settings_table`).

Only reads job records (plain dicts, as `run_experiment` returns them and jobs.json keeps), so a
table can be rebuilt from a finished run without running anything.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from simulator.experiment import PUBLISHED, ExperimentSettings, trainer_config
from trainer.intervals import Interval, grid_interval, paired_interval
from trainer.percentile import percentile


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def _job_numbers(
    job: dict[str, Any], size: str | None = None, settings: ExperimentSettings | None = None
) -> dict[str, Any]:
    peers = [p for p in job["peers"] if size is None or p["size"] == size]
    cumulative = math.fsum(r for p in peers for r in p["rewards"] if r is not None)
    finals = [p["evals"][-1]["accuracy"] for p in peers if p["evals"]]
    starts = [p["evals"][0]["accuracy"] for p in peers if p["evals"] and p["evals"][0]["round"] == -1]
    return {
        "question_gains": _question_gains(peers),
        "off_specialty_gains": _off_specialty_gains(peers, settings)
        if settings is not None and settings.setting == "specialised"
        else None,
        "generate_cpu_s_per_peer": statistics.fmean(p.get("generate_cpu_s", 0.0) for p in peers)
        if peers
        else None,
        "cumulative_reward": cumulative,
        "cumulative_reward_per_peer": cumulative / len(peers) if peers else None,
        "final_accuracy": statistics.fmean(finals) if finals else None,
        "start_accuracy": statistics.fmean(starts) if starts else None,
        "honest_peers": len(peers),
    }


def _peer_question_gains(peer: dict[str, Any]) -> list[float] | None:
    """One peer's per-question gain, last evaluation minus the one before training; None when it
    has no start evaluation or no per-question results (the simulated learner)."""
    evals = peer["evals"]
    if len(evals) < 2 or evals[0]["round"] != -1:
        return None
    first, last = evals[0].get("per_question"), evals[-1].get("per_question")
    if not first or not last or len(first) != len(last):
        return None
    return [after - before for before, after in zip(first, last, strict=True)]


def _off_specialty_gains(peers: Sequence[dict[str, Any]], settings: ExperimentSettings) -> list[float] | None:
    """Specialised swarms: per held-out question, the mean gain of the peers whose own questions
    come from OTHER tasks (what a peer learned about a task it never answers itself). The held-out
    set lists each task's `eval_questions` questions in task order; None when it does not (a task
    with fewer distinct held-out questions), or when a question has no such peer."""
    from protocol.questions import specialty

    tasks = settings.trainer_tasks()
    size = settings.eval_questions
    columns: list[list[float]] = [[] for _ in range(size * len(tasks))]
    for peer in peers:
        gains = _peer_question_gains(peer)
        if gains is None or len(gains) != len(columns):
            return None
        own = tasks.index(specialty(tasks, peer["peer_id"]))
        for position, gain in enumerate(gains):
            if position // size != own:
                columns[position].append(gain)
    if any(not column for column in columns):
        return None
    return [statistics.fmean(column) for column in columns]


def _question_gains(peers: Sequence[dict[str, Any]]) -> list[float] | None:
    """Per held-out question, the mean over `peers` of (last evaluation - the one before
    training): what a row's gain interval resamples. None when a peer lacks per-question results
    (the simulated learner) or the start evaluation."""
    rows = [_peer_question_gains(peer) for peer in peers]
    if not rows or any(row is None for row in rows) or len({len(row) for row in rows}) != 1:
        return None
    return [statistics.fmean(column) for column in zip(*rows, strict=True)]


def _gain_interval(numbers: Sequence[dict[str, Any]], key: str = "question_gains") -> dict[str, float] | None:
    rows = [n[key] for n in numbers]
    if not rows or any(row is None for row in rows) or len({len(row) for row in rows}) != 1:
        return None
    return grid_interval(rows).as_dict()


def _paired_against(
    ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]
) -> dict[str, dict[str, float] | None]:
    """This arm minus `theirs` on the same seeds (lists in seed order): the held-out gain's
    difference (two-way bootstrap over seeds and questions) and the cumulative reward per peer's
    (Student's t over seeds)."""
    pairs = list(zip(ours, theirs, strict=True))

    def difference(key: str) -> dict[str, float] | None:
        if not pairs or not all(a[key] and b[key] for a, b in pairs):
            return None
        diffs = [[x - y for x, y in zip(a[key], b[key], strict=True)] for a, b in pairs]
        return grid_interval(diffs).as_dict()

    rewards = [
        a["cumulative_reward_per_peer"] - b["cumulative_reward_per_peer"]
        for a, b in pairs
        if a["cumulative_reward_per_peer"] is not None and b["cumulative_reward_per_peer"] is not None
    ]
    reward = paired_interval(rewards).as_dict() if len(rewards) >= 2 else None
    return {
        "gain_difference": difference("question_gains"),
        "off_specialty_difference": difference("off_specialty_gains"),
        "reward_difference": reward,
    }


def summarize(settings: ExperimentSettings, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The table (per arm: numbers over seeds) and the curves (per arm and round)."""
    arms = settings.arms()
    rows = []
    sizes = ["base", "large"] if settings.swarm_hetero else [None]
    for arm in arms:
        mine = [job for job in jobs if job["arm"] == arm.name]
        for size in sizes:
            numbers = [_job_numbers(job, size, settings) for job in mine]
            updates = [
                u for job in mine for p in job["peers"] if size in (None, p["size"]) for u in p["updates"]
            ]
            local = [
                x
                for job in mine
                for p in job["peers"]
                if size in (None, p["size"])
                for x in p["trained_local"]
            ]
            external = [
                x
                for job in mine
                for p in job["peers"]
                if size in (None, p["size"])
                for x in p["trained_external"]
            ]
            row = {
                "configuration": arm.name,
                "size": size or "all",
                "n_local": arm.n_local,
                "n_external": arm.n_external,
                "sampling": arm.sampling,
                "verify": arm.verify,
                "forgers": arm.forgers,
                "baseline": arm.baseline or f"{settings.splits[0][0]}/{settings.splits[0][1]}",
                "honest_peers": numbers[0]["honest_peers"] if numbers else 0,
                "seeds": [job["seed"] for job in mine],
                "cumulative_reward": _spread([n["cumulative_reward"] for n in numbers]),
                "cumulative_reward_per_peer": _spread(
                    [
                        n["cumulative_reward_per_peer"]
                        for n in numbers
                        if n["cumulative_reward_per_peer"] is not None
                    ]
                ),
                "final_accuracy": _spread(
                    [n["final_accuracy"] for n in numbers if n["final_accuracy"] is not None]
                ),
                "start_accuracy": _spread(
                    [n["start_accuracy"] for n in numbers if n["start_accuracy"] is not None]
                ),
                "groups_per_update": _spread([float(u[0]) for u in updates]),
                "completions_per_update": _spread([float(u[1]) for u in updates]),
                "groups_used_per_update": _spread([float(u[2]) for u in updates if len(u) > 2]),
                "heldout_gain": _gain_interval(numbers),
                "off_specialty_gain": _gain_interval(numbers, "off_specialty_gains"),
                "generate_cpu_s_per_peer": _spread(
                    [
                        n["generate_cpu_s_per_peer"]
                        for n in numbers
                        if n["generate_cpu_s_per_peer"] is not None
                    ]
                ),
                "questions_per_round": arm.questions_per_round or settings.questions_per_round,
                "_numbers": numbers,
                "trained_local_mean": statistics.fmean(local) if local else None,
                "trained_external_mean": statistics.fmean(external) if external else None,
                "invalid_trained": sum(job["invalid_trained"] for job in mine),
                "wall_s": sum(job["wall_s"] for job in mine),
            }
            rows.append(row)
    by_key = {(row["configuration"], row["size"]): row for row in rows}
    for row in rows:
        base = by_key.get((row["baseline"], row["size"]))
        ours = row["cumulative_reward_per_peer"]["mean"]
        theirs = base["cumulative_reward_per_peer"]["mean"] if base else None
        row["ratio_to_baseline"] = ours / theirs if ours is not None and theirs else None
        first = by_key.get((f"{settings.splits[0][0]}/{settings.splits[0][1]}", row["size"]))
        theirs = first["cumulative_reward_per_peer"]["mean"] if first else None
        row["ratio_to_first_split"] = ours / theirs if ours is not None and theirs else None
        row["vs_first_split"] = (
            _paired_against(row["_numbers"], first["_numbers"])
            if first is not None and first is not row and first["seeds"] == row["seeds"]
            else None
        )
        row["vs_baseline"] = (
            _paired_against(row["_numbers"], base["_numbers"])
            if base is not None and base is not first and base is not row and base["seeds"] == row["seeds"]
            else None
        )
    for row in rows:
        del row["_numbers"]
    return {"rows": rows, "curves": _curves(settings, jobs)}


def _band(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "mean": statistics.fmean(values),
        "p10": percentile(values, 0.1),
        "p90": percentile(values, 0.9),
        "min": min(values),
        "max": max(values),
    }


def _curves(settings: ExperimentSettings, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm (and per model size in a hetero swarm: keys "arm [size]"): reward per round and
    held-out accuracy per evaluation point, over every (seed, honest peer): mean, p10-p90,
    min-max. Accuracy's x is rounds trained (0 = start)."""
    curves: dict[str, Any] = {}
    sizes = ("base", "large") if settings.swarm_hetero else (None,)
    for arm in settings.arms():
        mine = [job for job in jobs if job["arm"] == arm.name]
        for size in sizes:
            peers = [p for job in mine for p in job["peers"] if size in (None, p["size"])]
            reward = []
            for round_number in range(settings.rounds):
                values = [p["rewards"][round_number] for p in peers if p["rewards"][round_number] is not None]
                reward.append({"round": round_number, **(_band(values) or {})})
            points: dict[int, list[float]] = {}
            for peer in peers:
                for entry in peer["evals"]:
                    points.setdefault(entry["round"] + 1, []).append(entry["accuracy"])
            accuracy = [{"rounds_trained": x, **(_band(v) or {})} for x, v in sorted(points.items())]
            name = arm.name if size is None else f"{arm.name} [{size}]"
            curves[name] = {"arm": arm.name, "size": size or "all", "reward": reward, "accuracy": accuracy}
    return curves


# ---- output ------------------------------------------------------------------------------


def _fmt(spread: dict[str, Any], digits: int) -> str:
    if spread.get("mean") is None:
        return "–"
    text = f"{spread['mean']:.{digits}f} ± {spread['std']:.{digits}f}"
    return text + f" [{spread['min']:.{digits}f}–{spread['max']:.{digits}f}]"


def _interval_text(interval: dict[str, float] | None, digits: int = 3) -> str:
    return "–" if interval is None else Interval(**interval).text(digits)


def table_markdown(settings: ExperimentSettings, summary: dict[str, Any]) -> str:
    first = f"{settings.splits[0][0]}/{settings.splits[0][1]}"
    lines = [
        f"Sharing experiment: {settings.peers} peers ({settings.policy}), {settings.rounds} rounds, "
        f"seeds {', '.join(map(str, settings.seeds))}; {settings.questions_per_round} questions x "
        f"{settings.group_size} completions per peer and round; {settings.budget} groups per update.",
        f"Setting: {settings.setting}. "
        "Numbers are mean ± std [min–max] over seeds. Cumulative reward: the mean reward of each honest "
        "peer's own completions, summed over honest peers and rounds. Ratio: cumulative reward per peer "
        "against the baseline row's. Held-out gain: the honest peers' mean accuracy gain from before "
        "training to the end, with a 95% interval over seeds and questions; vs "
        f"{first}: this row minus {first} on the same seeds (gain: 95% interval over seeds and questions; "
        "cumulative reward per peer: Student's t over seeds). Groups used: what the trainer trained on "
        "(held-out and zero-advantage groups dropped). Generation: CPU seconds per peer in generate().",
        "",
        "| configuration | size | honest peers | cumulative reward | per peer | ratio to "
        f"{first} | vs baseline | held-out accuracy start → end | held-out gain [95%] "
        f"| gain vs {first} [95%] | reward per peer vs {first} [95%] | groups given / update [min–max] "
        "| groups used / update | local + external (mean) | questions / round | generation CPU s / peer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        ratio = row["ratio_to_first_split"]
        vs = row["ratio_to_baseline"] if row["baseline"] != first else None
        groups = row["groups_per_update"]
        groups_text = (
            "–"
            if groups["mean"] is None
            else f"{groups['mean']:.2f} [{groups['min']:.0f}–{groups['max']:.0f}]"
        )
        start = row["start_accuracy"]["mean"]
        versus = row.get("vs_first_split") or {}
        used = row["groups_used_per_update"]
        lines.append(
            "| "
            + " | ".join(
                [
                    row["configuration"],
                    row["size"],
                    str(row["honest_peers"]),
                    _fmt(row["cumulative_reward"], 2),
                    _fmt(row["cumulative_reward_per_peer"], 2),
                    "–" if ratio is None else f"{ratio:.3f}",
                    "–" if vs is None else f"{vs:.3f} (vs {row['baseline']})",
                    ("–" if start is None else f"{start:.3f} → ") + _fmt(row["final_accuracy"], 3),
                    _interval_text(row["heldout_gain"]),
                    _interval_text(versus.get("gain_difference")),
                    _interval_text(versus.get("reward_difference"), 2),
                    groups_text,
                    "–"
                    if used["mean"] is None
                    else f"{used['mean']:.2f} [{used['min']:.0f}–{used['max']:.0f}]",
                    "–"
                    if row["trained_local_mean"] is None
                    else f"{row['trained_local_mean']:.2f} + {row['trained_external_mean']:.2f}",
                    str(row["questions_per_round"]),
                    _fmt(row["generate_cpu_s_per_peer"], 1),
                ]
            )
            + " |"
        )
    variants = [row for row in summary["rows"] if row.get("vs_baseline")]
    if variants:
        lines.append("")
        lines.append(
            "Rows beyond the splits against the split they run on (same seeds; held-out gain: 95% interval "
            "over seeds and questions; reward per peer: Student's t): "
            + "; ".join(
                f"{row['configuration']} vs {row['baseline']}: gain "
                f"{_interval_text(row['vs_baseline']['gain_difference'])}, reward "
                f"{_interval_text(row['vs_baseline']['reward_difference'], 2)}"
                + (
                    f", off-specialty gain {_interval_text(row['vs_baseline']['off_specialty_difference'])}"
                    if row["vs_baseline"].get("off_specialty_difference")
                    else ""
                )
                for row in variants
            )
            + "."
        )
    if settings.setting == "specialised":
        lines.append("")
        lines.append(
            "Off-specialty gain (held-out questions of the tasks a peer never answers itself, 95% interval "
            "over seeds and questions): "
            + "; ".join(
                f"{row['configuration']} {_interval_text(row['off_specialty_gain'])}"
                + (
                    f" (vs {first}: {_interval_text(row['vs_first_split'].get('off_specialty_difference'))})"
                    if row.get("vs_first_split")
                    else ""
                )
                for row in summary["rows"]
            )
            + "."
        )
    forged = [row for row in summary["rows"] if row["forgers"]]
    if forged:
        lines.append("")
        lines.append(
            "Rows with forgers: "
            + "; ".join(
                f"{row['configuration']}: {row['forgers']} reward-inverting peers, "
                f"{row['invalid_trained']} forged groups trained on by honest peers (all seeds)"
                for row in forged
            )
            + "."
        )
    return "\n".join(lines) + "\n"


def write_outputs(
    settings: ExperimentSettings,
    jobs: list[dict[str, Any]],
    out: Path,
    command: str,
    elapsed_s: float | None = None,
) -> list[Path]:
    """table.md, table.json (+ the raw per-peer records in jobs.json), the plots, settings.json.
    `elapsed_s`: the whole experiment's wall time, kept in table.json with the jobs' own times."""
    summary = summarize(settings, jobs)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    table = out / "table.md"
    table.write_text(table_markdown(settings, summary))
    written.append(table)
    data = {"settings": settings.to_json(), "rows": summary["rows"], "curves": summary["curves"]}
    data["published"] = PUBLISHED
    data["timing"] = {
        "elapsed_s": elapsed_s,
        "jobs": settings.jobs,
        "job_wall_s": math.fsum(job["wall_s"] for job in jobs),
        "job_cpu_s": math.fsum(job.get("cpu_s", 0.0) for job in jobs),
    }
    (out / "table.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    written.append(out / "table.json")
    (out / "jobs.json").write_text(json.dumps(jobs, sort_keys=True) + "\n")
    written.append(out / "jobs.json")
    written.extend(write_plots(settings, summary, out))
    written.append(write_settings(settings, out, command))
    return written


def write_settings(settings: ExperimentSettings, out: Path, command: str) -> Path:
    """Everything needed to rerun: the settings, every seed, the trainer config, the command."""
    data: dict[str, Any] = {
        "command": command,
        "settings": settings.to_json(),
        "arms": [attrs.asdict(arm) for arm in settings.arms()],
        "seeds": list(settings.seeds),
    }
    if settings.policy == "trainer":
        # As every peer runs it: the simulator sets device, threads and G (TrainerSwarm).
        config = attrs.evolve(
            trainer_config(settings), device="cpu", threads=1, num_generations=settings.group_size
        )
        data["trainer_config"] = {k: v for k, v in attrs.asdict(config).items() if k != "data_dir"}
        if settings.swarm_hetero:
            data["trainer_config_large"] = dict(settings.large)
    try:
        import torch

        data["torch"] = torch.__version__
    except ImportError:  # pragma: no cover - the sim policy runs without torch
        pass
    path = out / "settings.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return path


def write_plots(settings: ExperimentSettings, summary: dict[str, Any], out: Path) -> list[Path]:
    """reward.png and accuracy.png: one line per configuration (mean over honest peers and
    seeds) with a p10-p90 band over (peer, seed). Left panel: the splits; right panel (when
    there are variants): each variant against the split it is compared with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curves = summary["curves"]
    arms = settings.arms()
    colors = dict(zip([arm.name for arm in arms], plt.get_cmap("tab10").colors, strict=False))
    splits = [arm.name for arm in arms if not arm.baseline]
    variants = [arm.name for arm in arms if arm.baseline]
    panels = [("L/E splits", splits)]
    if variants:
        baselines = sorted({arm.baseline for arm in arms if arm.baseline})
        panels.append((f"beyond the published setup (vs {', '.join(baselines)})", baselines + variants))
    written = []
    for key, name, xlabel, ylabel, x_key in (
        ("reward", "reward.png", "round", "mean reward of own completions", "round"),
        ("accuracy", "accuracy.png", "rounds trained", "held-out accuracy", "rounds_trained"),
    ):
        fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels) + 1.2, 4.4), squeeze=False)
        lows, highs = [], []
        for ax, (title, names) in zip(axes[0], panels, strict=True):
            for curve_name, curve in curves.items():
                arm = curve["arm"]
                if arm not in names:
                    continue
                points = [p for p in curve[key] if p.get("mean") is not None]
                if not points:
                    continue
                x = [p[x_key] for p in points]
                color = colors[arm]
                ax.fill_between(
                    x, [p["p10"] for p in points], [p["p90"] for p in points], color=color, alpha=0.1
                )
                ax.plot(
                    x,
                    [p["mean"] for p in points],
                    color=color,
                    linewidth=1.8,
                    label=curve_name,
                    marker=("s" if curve["size"] == "large" else "o") if key == "accuracy" else None,
                    markersize=3,
                    linestyle=":"
                    if curve["size"] == "large"
                    else ("--" if arm in splits and names is not splits else "-"),
                )
                lows.extend(p["p10"] for p in points)
                highs.extend(p["p90"] for p in points)
            ax.set(xlabel=xlabel, ylabel=ylabel)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        if lows:  # one y range for both panels, fitted to the data
            low, high = min(lows), max(highs)
            pad = max(0.005, (high - low) * 0.06)
            for ax in axes[0]:
                ax.set_ylim(max(0.0, low - pad), high + pad)
        fig.suptitle(
            f"{ylabel}: {settings.peers} peers ({settings.policy}), {settings.rounds} rounds\n"
            f"mean over honest peers and {len(settings.seeds)} seeds, band p10–p90 over (peer, seed)",
            fontsize=10,
        )
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=80, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def write_settings_table(runs: Sequence[tuple[ExperimentSettings, Path]], out: Path) -> Path:
    """settings.md and settings.json in `out`: when sharing pays, one block of rows per setting
    (read back from each setting's table.json), every split against the first on the same seeds."""
    lines = [
        "| setting | configuration | size | held-out gain [95%] | gain vs first split [95%] "
        "| off-specialty gain vs first split [95%] | cumulative reward per peer "
        "| reward vs first split [95%] | groups used / update | generation CPU s / peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    data = []
    for settings, folder in runs:
        rows = json.loads((folder / "table.json").read_text())["rows"]
        for row in rows:
            versus = row.get("vs_first_split") or {}
            used = row["groups_used_per_update"]
            lines.append(
                "| "
                + " | ".join(
                    [
                        settings.setting,
                        row["configuration"],
                        row["size"],
                        _interval_text(row["heldout_gain"]),
                        _interval_text(versus.get("gain_difference")),
                        _interval_text(versus.get("off_specialty_difference")),
                        _fmt(row["cumulative_reward_per_peer"], 2),
                        _interval_text(versus.get("reward_difference"), 2),
                        "–" if used["mean"] is None else f"{used['mean']:.2f}",
                        _fmt(row["generate_cpu_s_per_peer"], 1),
                    ]
                )
                + " |"
            )
            data.append({"setting": settings.setting, **row})
    first = runs[0][0]
    header = (
        f"When sharing pays: {first.peers} peers ({first.policy}), {first.rounds} rounds, seeds "
        f"{', '.join(map(str, first.seeds))}. Intervals are 95%: held-out gains over seeds and questions "
        "(two-way bootstrap), reward differences by Student's t over the paired seeds.\n\n"
    )
    path = out / "settings.md"
    path.write_text(header + "\n".join(lines) + "\n")
    (out / "settings.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path
