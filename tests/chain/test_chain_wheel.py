"""A built wheel carries the contract (ABI, bytecode and Vyper source) and loads it installed, and
it carries the shipped tiny model (trainer/shipped/, every file byte for byte).

The wheel is built offline from a copy of the project (building in the checkout would leave
build/ and egg-info behind), unpacked into a fresh folder, and used from there by a
subprocess whose PYTHONPATH puts that folder first, away from the checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from swarmp2p.chain.artifact import ARTIFACT_PATH, SOURCE_PATH, load_artifact

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("swarmp2p", "protocol", "trainer", "simulator")
IN_WHEEL = ("swarmp2p/chain/contracts/SwarmCoordinator.json", "swarmp2p/chain/contracts/SwarmCoordinator.vy")

LOAD_INSTALLED = """
import json, swarmp2p.chain.artifact as a
artifact = a.load_artifact()
# What `swarmp2p chain compile --check` does, from the installed source.
up_to_date = a.artifact_json(a.compile_source()) == a.ARTIFACT_PATH.read_text()
print(json.dumps({"module": a.__file__, "artifact": str(a.ARTIFACT_PATH), "bytecode": artifact.bytecode,
                  "source": a.SOURCE_PATH.read_text(), "up_to_date": up_to_date}))
"""


def build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("swarmp2p-*.whl")
    return wheel


def test_wheel_carries_the_contract_and_loads_it_from_the_install(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert set(IN_WHEEL) <= names
        assert archive.read(IN_WHEEL[0]) == ARTIFACT_PATH.read_bytes()
        shipped = sorted(p for p in (REPO / "trainer" / "shipped").rglob("*") if p.is_file())
        assert shipped, "a shipped tiny model to look for"
        for path in shipped:
            assert archive.read(str(path.relative_to(REPO))) == path.read_bytes(), path
        site = tmp_path / "site"
        archive.extractall(site)

    run = subprocess.run(
        [sys.executable, "-c", LOAD_INSTALLED],
        cwd=tmp_path,  # not the checkout: nothing may come from there
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert Path(loaded["module"]).is_relative_to(site)
    assert Path(loaded["artifact"]).is_relative_to(site)
    assert loaded["bytecode"] == load_artifact().bytecode
    assert loaded["source"] == SOURCE_PATH.read_text()
    assert loaded["up_to_date"] is True


def test_artifact_paths_point_inside_the_package() -> None:
    """One copy: the repository's `contracts` is the package's folder, not a second copy."""
    package_dir = Path(__import__("swarmp2p.chain").chain.__file__).parent
    assert ARTIFACT_PATH.parent == package_dir / "contracts"
    assert (REPO / "contracts").resolve() == ARTIFACT_PATH.parent
