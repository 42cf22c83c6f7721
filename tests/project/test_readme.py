"""The README's quickstart works when pasted, as root without `sudo` (containers) or as a user with
it, and its join sample is what a node prints (a real path, no `<placeholder>`)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


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


def _node_sample() -> list[str]:
    """The README's sample of what `swarmp2p node` prints."""
    section = README.read_text().split("`swarmp2p node` says first", 1)[1]
    return re.search(r"```text\n(.*?)\n```", section, re.S).group(1).splitlines()


def _shape(line: str) -> re.Pattern[str]:
    """A sample line as a pattern: peer ids, the swarm id, ports, numbers and the join command's
    data dir vary from run to run; every other character must be what the node prints."""
    words = re.split(r"(12D3KooW\w+|swarm [0-9a-f]{12}|--data-dir \S+|\d+(?:\.\d+)?)", line)
    parts = []
    for index, word in enumerate(words):
        if index % 2 == 0:
            parts.append(re.escape(word))
        elif word.startswith("12D3KooW"):
            parts.append(r"12D3KooW\w+")
        elif word.startswith("swarm "):
            parts.append(r"swarm [0-9a-f]{12}")
        elif word.startswith("--data-dir"):
            parts.append(r"--data-dir \S+")
        else:
            parts.append(r"\d+(?:\.\d+)?")
    return re.compile("".join(parts))


def test_the_readme_node_sample_is_what_a_lone_node_prints(tmp_path: Path) -> None:
    """Started as the README starts it (no arguments, in a fresh folder, by a new user: an empty
    cache, so the shipped tiny model is copied and the evaluation runs), a node prints every line
    of the sample, in order, each with the same words (ids, ports and numbers aside)."""
    import signal
    import sys
    import time

    sample = _node_sample()
    assert sample and sample[-1].startswith("round 0 |"), sample
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        node = subprocess.Popen(
            [sys.executable, "-m", "swarmp2p.cli", "node"],
            cwd=tmp_path,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 600  # a first build of the tiny model, should the shipped one not check
        while not PLAYED_ROUND_LINE.search(log.read_text()):
            assert node.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
    printed = [line for line in log.read_text().splitlines() if "pre-training step" not in line]
    printed = printed[: next(i for i, line in enumerate(printed) if PLAYED_ROUND_LINE.match(line)) + 1]
    printed = [_as_on_time(line) for line in printed]
    at = 0
    for line in sample:
        shape = _shape(line)
        while at < len(printed) and not shape.fullmatch(printed[at]):
            at += 1
        assert at < len(printed), f"README line {line!r} not printed (in order):\n" + "\n".join(printed)
    # ... and nothing but what the README shows (the model build aside, and what a busy machine
    # adds: a skipped round, or the node doing less of its own work until rounds fit again).
    extra = [p for p in printed if not any(_shape(s).fullmatch(p) for s in sample)]
    assert all(BUSY_HOST_LINE.search(p) for p in extra), extra


PLAYED_ROUND_LINE = re.compile(r"^round \d+(?! \(skipped)( \([^)]*\))? \|", re.M)
"""The first round a node played (on time, or late on a busy machine), not one it skipped."""
BUSY_HOST_LINE = re.compile(r"busy host: |: skipping round \d+: |^round \d+ \(skipped")
"""Lines a node adds on a loaded machine (the README shows an idle one's first round)."""


def _as_on_time(line: str) -> str:
    """A round line as the README shows it: a round's fate in brackets (reported late on a busy
    machine) and an evaluation that came in with it (on a fast one) are left out."""
    line = re.sub(r"^(round \d+) \((?!skipped)[^)]*\)", r"\1", line)
    return re.sub(r" \| (eval |held-out ).*$", "", line) if line.startswith("round ") else line
