"""The tiny model's build cache: one build per fingerprint, shared by every data dir that points at it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import trainer.tiny as tiny
from trainer.config import TrainerConfig, user_model_cache


def test_concurrent_users_of_one_cache_build_the_model_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[Path] = []

    def slow_build(folder: Path, spec: tiny.TinySpec, progress: object = None) -> None:
        builds.append(folder)
        time.sleep(0.3)  # long enough for the other threads to arrive while it builds
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(tiny, "build_tiny", slow_build)
    spec = tiny.TinySpec.of(TrainerConfig(tiny_seed=7))  # no shipped build of these (test_tiny_shipped.py)
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(tiny.ensure_tiny(tmp_path / "cache", spec)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1, "the others waited for the first build and loaded it"
    assert found == [tiny.tiny_folder(tmp_path / "cache", spec)] * 3


def test_the_cache_defaults_to_the_data_dir_and_the_cli_default_is_per_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert TrainerConfig(data_dir=str(tmp_path)).model_cache_path == tmp_path / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Path(user_model_cache()) == tmp_path / "xdg" / "swarmp2p" / "models"
    assert (
        TrainerConfig(model_cache=user_model_cache()).model_cache_path
        == tmp_path / "xdg" / "swarmp2p" / "models"
    )


def test_the_training_seed_does_not_change_the_base_model() -> None:
    assert tiny.TinySpec.of(TrainerConfig(seed=1)) == tiny.TinySpec.of(TrainerConfig(seed=2))
    assert tiny.TinySpec.of(TrainerConfig(tiny_seed=1)) != tiny.TinySpec.of(TrainerConfig(tiny_seed=2))
