"""A hub model id that cannot be fetched fails in seconds (swarmp2p/model_source.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmp2p import model_source
from swarmp2p.model_source import ModelUnreachable, check_model_reachable


def test_tiny_and_local_folders_are_never_probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_source.socket, "create_connection", None)  # would raise if called
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for model in ("tiny", str(tmp_path), "./no-such-folder", "~/models/x", "a/b/c"):
        check_model_reachable(model)


def test_offline_mode_and_an_uncached_id_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_source, "_cached", lambda model: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnreachable, match="offline mode") as error:
        check_model_reachable("some-org/some-model")
    assert "\n" not in str(error.value)


def test_a_cached_id_is_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_source, "_cached", lambda model: True)
    monkeypatch.setattr(model_source.socket, "create_connection", None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model_reachable("some-org/some-model")
