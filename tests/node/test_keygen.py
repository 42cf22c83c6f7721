"""`swarmp2p keygen` through the CLI: writes a 0600 identity, prints its peer id, refuses overwrite."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

from typer.testing import CliRunner

from swarmp2p.cli import app
from swarmp2p.identity import load_identity

runner = CliRunner()


def test_keygen_writes_identity_and_prints_peer_id(tmp_path):
    path = tmp_path / "keys" / "node.key"  # parent does not exist yet
    result = runner.invoke(app, ["keygen", "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == load_identity(path).peer_id
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_keygen_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "node.key"
    first = runner.invoke(app, ["keygen", "--out", str(path)])
    before = path.read_bytes()

    again = runner.invoke(app, ["keygen", "--out", str(path)])
    assert again.exit_code == 1
    assert again.stdout == ""
    assert len(again.stderr.strip().splitlines()) == 1 and "--force" in again.stderr
    assert path.read_bytes() == before

    forced = runner.invoke(app, ["keygen", "--out", str(path), "--force"])
    assert forced.exit_code == 0
    assert forced.stdout.strip() != first.stdout.strip()
    assert forced.stdout.strip() == load_identity(path).peer_id


def test_keygen_requires_out():
    result = runner.invoke(app, ["keygen"])
    assert result.exit_code == 2


def test_keygen_console_script_end_to_end(tmp_path):
    path = tmp_path / "node.key"
    executable = shutil.which("swarmp2p") or os.path.join(os.path.dirname(sys.executable), "swarmp2p")
    completed = subprocess.run(
        [executable, "keygen", "--out", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == load_identity(path).peer_id
