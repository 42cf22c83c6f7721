"""`SWARMP2P_*` environment variables the project itself reads outside the config classes (the
anvil binary, the test command's workers, the test cache switch) are not refused by the config's
unknown-variable check. A user who sets one as the docs say (`SWARMP2P_ANVIL=... `, the README's
`SWARMP2P_TEST_WORKERS=0 bash scripts/test.sh`) must still be able to run every command: the
node, train and chain commands refuse any other unknown `SWARMP2P_*` name with one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmp2p.config import REGISTRY

REPO = Path(__file__).resolve().parents[2]
# Where a variable is read from the environment: Python's os.environ / os.getenv, and the shell's
# ${NAME...} in the scripts.
READ = re.compile(r"""(?:environ(?:\.get|\.pop)?\(?\[?\s*|getenv\(\s*)["'](SWARMP2P_[A-Z0-9_]+)["']""")
SHELL_READ = re.compile(r"\$\{(SWARMP2P_[A-Z0-9_]+)")
CONSTANT = re.compile(r"""^[A-Z_]+_ENV\s*=\s*["'](SWARMP2P_[A-Z0-9_]+)["']""", re.MULTILINE)


def names_read_outside_the_config() -> set[str]:
    names: set[str] = set()
    for folder in ("swarmp2p", "scripts", "tests", "bench", "netlab", "simulator", "trainer"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix not in (".py", ".sh") or path.name == Path(__file__).name:
                continue
            text = path.read_text(errors="replace")
            names.update(READ.findall(text), SHELL_READ.findall(text), CONSTANT.findall(text))
    return names


def test_the_scan_finds_the_variables_the_project_reads() -> None:
    # The scan itself can fail: these are read in swarmp2p/chain/anvil.py, scripts/test.sh and
    # tests/conftest.py.
    assert {
        "SWARMP2P_ANVIL",
        "SWARMP2P_TEST_WORKERS",
        "SWARMP2P_TEST_KEEP_CACHE",
    } <= names_read_outside_the_config()


def test_every_variable_the_project_reads_is_known_to_the_config() -> None:
    REGISTRY.import_lazy()
    known = REGISTRY.known_env_names("SWARMP2P_")
    assert names_read_outside_the_config() - known == set()


@pytest.mark.parametrize("variable", ["SWARMP2P_TEST_WORKERS", "SWARMP2P_ANVIL"])
def test_a_command_runs_with_a_documented_variable_set(
    variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from swarmp2p.cli import app

    monkeypatch.setenv(variable, "0")
    # The command goes on to its own checks: here the flag's one-line error, not the variable's.
    done = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path), "--eval-questions", "0"])
    assert done.exit_code == 2
    assert "eval_questions" in done.output and variable not in done.output, done.output


def test_an_unknown_variable_is_still_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from swarmp2p.cli import app

    monkeypatch.setenv("SWARMP2P_TEST_WORKRES", "2")
    done = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path)])
    assert done.exit_code == 2
    assert "unknown environment variable SWARMP2P_TEST_WORKRES" in done.output, done.output
