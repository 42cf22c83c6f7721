"""The `swarmp2p chain ...` commands that README.md and docs/chain.md show run as written, in
order, against a live local chain (anvil on a free port).

What the test changes, and only that: the RPC URL (`http://127.0.0.1:8545` or `URL`) becomes the
test chain's; `ADDR` / `0x…` becomes the contract the documented `deploy` printed; `/ip4/...`
becomes a concrete multiaddr; optional `[--flag value]` parts are given; a new key is funded
(as the docs say to); `devnet` gets `--port 0` (8545 may be taken on a shared machine);
commands that run until Ctrl-C (devnet, stage-manager) are stopped with SIGINT once they have
shown they work, and must then exit 0.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarmp2p.chain.anvil import Anvil

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _block_commands(text: str) -> list[str]:
    commands = []
    for line in text.splitlines():
        if line.startswith("swarmp2p chain "):
            commands.append(re.split(r"\s+#", line, maxsplit=1)[0].strip())
    return commands


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return [c for block in re.findall(r"```bash\n(.*?)```", text, re.S) for c in _block_commands(block)]


def chain_doc_commands() -> list[str]:
    section = (REPO / "docs/chain.md").read_text().split("## Command line", 1)[1]
    return _block_commands(re.search(r"```\n(.*?)```", section, re.S).group(1))


@pytest.fixture
def anvil() -> Iterator[Anvil]:
    try:
        chain = Anvil()
    except Exception as error:
        pytest.fail(str(error))
    with chain:
        yield chain


def _substitute(command: str, url: str, contract: str | None) -> list[str]:
    command = re.sub(r"\[([^\]]*)\]", r"\1", command)  # give the optional parts
    command = command.replace("http://127.0.0.1:8545", url).replace(
        "/ip4/.../p2p/...", "/ip4/127.0.0.1/tcp/4001/p2p/QmBoot"
    )
    command = re.sub(r"\bURL\b", url, command)
    if contract is not None:
        command = re.sub(r"\bADDR\b|0x…", contract, command)
    assert "…" not in command and "..." not in command, command
    return shlex.split(command)


def _run_until(words: list[str], cwd: Path, expect: str, timeout_s: float) -> str:
    """Start a command that runs until stopped; once a line starting with `expect` is on its
    output, SIGINT it; it must exit 0."""
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmp2p.cli", *words[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    for line in process.stdout:
        seen.append(line)
        if line.startswith(expect) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)  # at once: a Ctrl-C at any moment must stop it cleanly
    rest, _ = process.communicate(timeout=60)
    output = "".join(seen) + rest
    assert process.returncode == 0, (words, output)
    assert any(line.startswith(expect) for line in seen), (words, output)
    return output


def _run_documented(commands: list[str], anvil: Anvil, cwd: Path) -> set[str]:
    contract: str | None = None
    ran = set()
    for command in commands:
        words = _substitute(command, anvil.url, contract)
        sub = words[2]
        ran.add(sub)
        if sub == "devnet":
            _run_until([*words, "--port", "0"], cwd, "state: ", 120)
            continue
        if sub == "stage-manager":
            _run_until(words, cwd, "stage manager: ", 60)  # advances every 30 s as documented
            continue
        done = subprocess.run(
            [sys.executable, "-m", "swarmp2p.cli", *words[1:]],
            capture_output=True, text=True, timeout=120, cwd=cwd,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if sub == "new-key":
            anvil.set_balance(done.stdout.strip(), 10**18)  # "fund it"
            key = Path(cwd, words[words.index("--out") + 1])
            assert key.stat().st_mode & 0o777 == 0o600
        if sub == "deploy":
            contract = done.stdout.strip().splitlines()[-1]
    return ran


def test_readme_chain_commands_run_as_written(anvil: Anvil, tmp_path: Path) -> None:
    commands = readme_commands()
    assert _run_documented(commands, anvil, tmp_path) >= {"devnet", "new-key", "deploy"}


def test_chain_doc_commands_run_as_written(anvil: Anvil, tmp_path: Path) -> None:
    commands = chain_doc_commands()
    ran = _run_documented(commands, anvil, tmp_path)
    assert ran >= {"devnet", "new-key", "deploy", "stage-manager", "add-bootnodes", "status", "compile"}
