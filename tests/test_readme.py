"""The README's quickstart works when pasted, as root without `sudo` (containers) or as a user with
it, and its join sample is what a node prints (a real path, no `<placeholder>`)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _quickstart() -> str:
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1]
    return re.search(r"```bash\n(.*?)\n```", section, re.S).group(1).strip()


def _run_install_part(tmp_path: Path, with_sudo: bool) -> list[str]:
    """The quickstart up to the venv, with fake apt-get (and sudo) recording their calls."""
    bin_dir = tmp_path / ("bin-sudo" if with_sudo else "bin-root")
    bin_dir.mkdir()
    calls = tmp_path / f"calls-{with_sudo}"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {calls}\n')
    if with_sudo:
        (bin_dir / "sudo").write_text(f'#!/bin/sh\necho "sudo" >> {calls}\nexec "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    install = _quickstart().split(" && python3 -m venv", 1)[0]
    done = subprocess.run(
        ["/bin/sh", "-c", install], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


def test_quickstart_runs_as_root_without_sudo_and_as_a_user_with_it(tmp_path: Path) -> None:
    command = _quickstart()
    assert "\n" not in command and not command.startswith("sudo")
    as_root = _run_install_part(tmp_path, with_sudo=False)
    assert as_root[0] == "apt-get update" and as_root[1].startswith("apt-get install -y")
    assert "libgmp-dev" in as_root[1]
    as_user = _run_install_part(tmp_path, with_sudo=True)
    assert as_user == ["sudo", "apt-get update", "sudo", as_root[1]]


def test_the_readme_join_sample_has_no_placeholder() -> None:
    text = README.read_text()
    joins = re.findall(r"^\s+(swarmp2p node --data-dir .*)$", text, re.M)
    assert joins, "the README shows no join command"
    for line in joins:
        assert not any(mark in line for mark in "<>|;&"), line
        words = shlex.split(line)
        assert Path(words[words.index("--data-dir") + 1]).is_absolute(), line
