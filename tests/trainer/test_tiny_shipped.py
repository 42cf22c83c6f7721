"""The default tiny model comes pre-built with the package (trainer/shipped/): it is the current
defaults' build, a first start copies it (checked) instead of pre-training for minutes, and a
damaged copy is built instead of used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import pytest

import trainer.tiny as tiny
from trainer.config import TrainerConfig

DEFAULT = tiny.TinySpec.of(TrainerConfig())


def test_the_shipped_model_is_the_current_defaults_build() -> None:
    shipped = tiny.shipped_folder(DEFAULT)
    assert shipped is not None, (
        f"no shipped tiny-{DEFAULT.fingerprint()} for the current defaults: a default that shapes the model "
        "changed; ship its build with `python scripts/ship_tiny.py --write` (about 4 minutes)"
    )
    assert json.loads((shipped / "tiny.json").read_text()) == json.loads(json.dumps(attrs.asdict(DEFAULT)))
    assert tiny.read_checksums(shipped) == tiny.checksums(shipped), "every shipped file matches SHA256SUMS"
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(tiny.read_checksums(shipped))
    assert [p.name for p in tiny.SHIPPED_DIR.glob("tiny-*")] == [shipped.name], "the defaults' build only"


def test_a_first_start_copies_the_shipped_model_instead_of_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("built although the shipped model checks")

    monkeypatch.setattr(tiny, "build_tiny", no_build)
    folder = tiny.ensure_tiny(tmp_path / "cache", DEFAULT)
    assert folder == tiny.tiny_folder(tmp_path / "cache", DEFAULT)
    shipped = tiny.shipped_folder(DEFAULT)
    assert shipped is not None
    assert tiny.checksums(folder) == tiny.read_checksums(shipped)
    assert tiny.ensure_tiny(tmp_path / "cache", DEFAULT) == folder, "then read from the cache"
    staging = [p for p in (tmp_path / "cache").iterdir() if p.is_dir() and p.name.startswith(".tiny-")]
    assert staging == [], "the staging folder is gone"


def test_a_damaged_shipped_model_is_built_instead_and_nothing_of_it_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = tiny.shipped_folder(DEFAULT)
    assert shipped is not None
    damaged = tmp_path / "shipped"
    shutil.copytree(shipped, damaged / shipped.name)
    weights = damaged / shipped.name / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(tiny, "SHIPPED_DIR", damaged)
    builds: list[Path] = []

    def build(folder: Path, spec: tiny.TinySpec, progress: object = None) -> None:
        builds.append(folder)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(tiny, "build_tiny", build)
    folder = tiny.ensure_tiny(tmp_path / "cache", DEFAULT)
    assert builds == [folder]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"], "no shipped file came along"


def test_other_settings_are_built_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[Path] = []

    def build(folder: Path, spec: tiny.TinySpec, progress: object = None) -> None:
        builds.append(folder)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(tiny, "build_tiny", build)
    other = attrs.evolve(DEFAULT, seed=DEFAULT.seed + 1)
    assert tiny.shipped_folder(other) is None
    folder = tiny.ensure_tiny(tmp_path / "cache", other)
    assert builds == [folder] == [tiny.tiny_folder(tmp_path / "cache", other)]


def test_a_build_is_a_pure_function_of_its_settings(tmp_path: Path) -> None:
    """What makes shipping one build sound: the same settings give the same bytes (on one machine;
    `python scripts/ship_tiny.py --check` compares a full default build with the shipped one)."""
    spec = tiny.TinySpec(
        tasks=("leg_counting",), difficulty=0, hidden=32, layers=1, vocab=300, seed=0, pretrain_steps=3
    )
    tiny.build_tiny(tmp_path / "a", spec)
    tiny.build_tiny(tmp_path / "b", spec)
    assert tiny.checksums(tmp_path / "a") == tiny.checksums(tmp_path / "b")


def test_the_shipped_model_is_a_weak_solver(tmp_path: Path) -> None:
    """Loaded the way a node loads it: it writes the answer format, and gets some held-out
    questions right and most wrong (the starting point GRPO needs; docs/trainer.md)."""
    from trainer.policy import TrainerPolicy

    config = TrainerConfig(
        data_dir=str(tmp_path / "data"),
        model_cache=str(tmp_path / "cache"),
        eval_questions=24,
        eval_generations_to_log=48,
    )
    result = TrainerPolicy(config).evaluate()
    assert 0.02 <= result["accuracy"] <= 0.6, result["accuracy"]
    texts = [sample["completion"] for sample in result["samples"]]
    assert len(texts) == result["questions"] > 0
    assert sum("<answer>" in t and "</answer>" in t for t in texts) >= 0.8 * len(texts), texts


def test_a_new_user_reads_the_shipped_held_out_sets_and_they_are_the_scanned_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default settings' validation and test sets ship (trainer/eval_set_cache.py): an empty
    cache reads them (checked by regenerating their texts) instead of scanning, and stores them."""
    from protocol import questions
    from trainer import eval_set_cache
    from trainer.tasks import ReasoningGymRegistry

    config = TrainerConfig()
    registry = ReasoningGymRegistry(config.tasks, difficulty=config.difficulty)

    def sets(cache: Path) -> list[tuple[object, ...]]:
        return [
            eval_set_cache.cached_evaluation_questions(
                config.tasks,
                config.eval_seed,
                config.eval_questions,
                registry.content_key,
                split,
                difficulty=config.difficulty,
                cache_dir=cache,
            )
            for split in ("validation", "test")
        ]

    monkeypatch.setattr(eval_set_cache, "SHIPPED_DIR", tmp_path / "nothing-shipped")
    scanned = sets(tmp_path / "scanned")  # a real scan: nothing cached, nothing shipped
    monkeypatch.undo()

    def no_scan(*_: object, **__: object) -> None:
        raise AssertionError("scanned although the shipped set checks")

    monkeypatch.setattr(questions, "evaluation_questions", no_scan)
    assert sets(tmp_path / "new-user") == scanned
    assert sorted(p.name for p in (tmp_path / "new-user").glob("*.json")) == sorted(
        p.name for p in eval_set_cache.SHIPPED_DIR.glob("*.json")
    ), "stored in the user's cache, and only the defaults' sets ship"


def test_a_shipped_list_naming_a_path_outside_its_folder_is_built_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = tiny.shipped_folder(DEFAULT)
    assert shipped is not None
    forged = tmp_path / "shipped" / shipped.name
    shutil.copytree(shipped, forged)
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    digest = tiny.checksums(tmp_path)["outside.txt"]
    with (forged / tiny.CHECKSUMS).open("a") as sums:
        sums.write(f"{digest}  ../../outside.txt\n")
    monkeypatch.setattr(tiny, "SHIPPED_DIR", tmp_path / "shipped")
    builds: list[Path] = []

    def build(folder: Path, spec: tiny.TinySpec, progress: object = None) -> None:
        builds.append(folder)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(tiny, "build_tiny", build)
    folder = tiny.ensure_tiny(tmp_path / "cache" / "models", DEFAULT)
    assert builds == [folder]
    assert not (tmp_path / "cache" / "outside.txt").exists()
