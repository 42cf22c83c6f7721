"""The hypothesis profiles of conftest.py: `ci` by default, `deep` by option or environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings


def test_print_the_active_profile() -> None:
    # The target of the subprocess runs below (harmless on its own).
    print(f"ACTIVE max_examples={settings.default.max_examples} deadline={settings.default.deadline}")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), None, 200),
        ((), "deep", 5000),
        (("--hypothesis-profile=deep",), "ci", 5000),  # the option wins over the environment
    ],
)
def test_the_profile_is_chosen_by_option_or_environment(
    args: tuple[str, ...], env: str | None, expected: int
) -> None:
    environment = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    if env is not None:
        environment["HYPOTHESIS_PROFILE"] = env
    target = f"{Path(__file__).name}::test_print_the_active_profile"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", target, *args],
        cwd=Path(__file__).parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ACTIVE max_examples={expected} deadline=None" in done.stdout, done.stdout
