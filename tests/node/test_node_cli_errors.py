"""`swarmp2p node` turns bad local setup into one line on stderr and exit code 1, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _node(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "node", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("data dir under a file", "cannot create data dir"),
        ("missing model folder", "model folder"),
    ],
)
def test_bad_local_setup_is_one_line(tmp_path: Path, case: str, expected: str) -> None:
    if case == "data dir under a file":
        (tmp_path / "file").write_text("not a folder")
        done = _node("--data-dir", str(tmp_path / "file" / "data"))
    else:
        done = _node("--data-dir", str(tmp_path / "data"), "--model", str(tmp_path / "no-such-model"))
    assert expected in _one_error_line(done)


def test_a_listen_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = _node("--data-dir", str(tmp_path / "data"), "--listen", f"/ip4/127.0.0.1/tcp/{port}")
    line = _one_error_line(done)
    assert f"/tcp/{port}" in line and "in use" in line


def test_a_hub_model_id_with_no_network_fails_in_seconds_in_one_line(tmp_path: Path) -> None:
    """Offline, a Hugging Face id once cost 60 s of retries and 44 duplicated warnings before the
    one-line error. Now the hub is probed first (here: a port where nothing listens)."""
    import os
    import time

    with socket.socket() as probe:  # a free port, closed again: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{port}",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "0",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(tmp_path / "data"),
         "--model", "some-org/some-model"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    line = _one_error_line(done)
    assert "some-org/some-model" in line and f"127.0.0.1:{port}" in line, line
    assert elapsed < 30, elapsed  # imports included; the probe itself waits at most 5 s
