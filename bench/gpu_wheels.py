"""Fill bench/wheelhouse/ (git-ignored) with the wheels bench/gpu_check.sh installs on a GPU machine
that has torch and transformers but no internet: the project's dependencies, trl and reasoning-gym,
with everything they need that the machine lacks.

    python bench/gpu_wheels.py                                   # for this Python and machine
    python bench/gpu_wheels.py --python-version 3.12 --present bench/gpu_present_h200.txt

Run it where the package index is reachable (here: the local mirror pip is configured with).
Versions are pinned to the environment running it (the combination the tests ran with), resolved
by pip's own resolver; torch and its CUDA stack (torch, triton, nvidia-*, cuda-*) are never
fetched: the GPU machine's own torch is the one to measure, and a CUDA torch is gigabytes.

`--python-version`: the GPU machine's Python (wheels of compiled packages are per version). A
package with no binary wheel for it (libp2p's fastecdsa and reasoning-gym's pycosat ship only
source) is built here by an interpreter of that version: `--build-python`, else `pythonX.Y` on
PATH or pyenv's `~/.pyenv/versions/X.Y.*` (fastecdsa needs gcc and libgmp-dev here, and links the
libgmp.so.10 every Debian or Ubuntu has). Without one, only pure-Python packages can be built, and
the script fails naming the others.
`--present FILE`: names (one a line; `#` starts a comment) of packages the GPU machine already
has; they are left out, which keeps the wheelhouse small enough to travel (the device tool carries
64 MiB), except that a wheel under `--spare-mib` (0.3 MiB) is still carried as a spare. pip on the
machine keeps its own copy when it satisfies the requirement, takes the spare when it does not,
and fails naming the package when there is no spare: then fetch that one too (drop it from the
file), or let gpu_check.sh fall back (it installs without trl, and the TRL rows fail).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_STACK = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
EXTRAS = ("trl>=0.12",)
"""Beside the project's own dependencies: trl, the baseline gpu_check.py compares against (a test
extra). The project itself is not a wheel: gpu_check.sh runs it from the checkout that travels."""
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """The project's dependencies without torch, plus EXTRAS: what gpu_check.sh installs."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    kept = [dep for dep in deps if not TORCH_STACK.match(canonical(re.split(r"[<>=!~\[ ;]", dep)[0]))]
    return [*kept, *EXTRAS]


def closure(reqs: list[str]) -> list[tuple[str, str]]:
    """(name, version) of every package `reqs` need, pinned to this environment where it has them."""
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        frozen = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        pins = [
            line for line in frozen if "==" in line and not TORCH_STACK.match(canonical(line.split("==")[0]))
        ]
        constraints.write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"),
                *("--report", str(report), "-c", str(constraints), *reqs, "torch"),
            ],
            check=True,
        )
        items = json.loads(report.read_text())["install"]
    found = [(item["metadata"]["name"], item["metadata"]["version"]) for item in items]
    return [(name, version) for name, version in found if not TORCH_STACK.match(canonical(name))]


def build_interpreter(python_version: str, given: str | None) -> str | None:
    """An interpreter of `python_version` to build compiled sdists with (see the module doc)."""
    if given:
        return given
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob(f"{python_version}.*/bin/python"))
    # a pyenv shim on PATH exists whether or not it can run: ask each candidate its version
    for candidate in [*map(str, pyenv), shutil.which(f"python{python_version}")]:
        if candidate is None:
            continue
        check = [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        answer = subprocess.run(check, capture_output=True, text=True, check=False)
        if answer.returncode == 0 and answer.stdout.strip() == python_version:
            return candidate
    return None


def fetch(
    name: str, version: str, wheels: Path, python_version: str | None, builder: str | None = None
) -> str | None:
    """Put a wheel of name==version for the target into `wheels`; None, or why it could not."""
    spec = f"{name}=={version}"
    pip = [sys.executable, "-m", "pip"]
    if python_version is None:  # this machine is the target: pip wheel copies or builds as needed
        done = subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(wheels), spec], check=False)
        return None if done.returncode == 0 else "pip wheel failed"
    target = ["--python-version", python_version, "--implementation", "cp"]
    target += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    binary = subprocess.run(
        [*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(wheels), *target, spec],
        capture_output=True,
        check=False,
    )
    if binary.returncode == 0:
        return None
    # No binary wheel for the target: build one, with the target's Python when there is one here
    # (any wheel it makes installs there), else with ours (usable there only if pure Python).
    with tempfile.TemporaryDirectory() as tmp:
        python = [builder or sys.executable, "-m", "pip"]
        built = subprocess.run([*python, "wheel", "--quiet", "--no-deps", "-w", tmp, spec], check=False)
        made = list(Path(tmp).glob("*.whl"))
        if built.returncode != 0 or not made:
            return "no wheel for the target and no build here"
        if builder is None and not made[0].name.endswith("-none-any.whl"):
            return f"no wheel for the target; built here as {made[0].name} (not pure Python: --build-python)"
        shutil.move(made[0], wheels / made[0].name)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "wheelhouse")
    parser.add_argument(
        "--python-version", default=None, help="the GPU machine's, e.g. 3.12 (default: this one)"
    )
    parser.add_argument("--build-python", default=None, help="an interpreter of that version, for sdists")
    parser.add_argument("--present", type=Path, default=None, help="file: packages the GPU machine has")
    parser.add_argument(
        "--spare-mib",
        type=float,
        default=0.3,
        help="still carry a present package whose wheel is under this size (default 0.3)",
    )
    args = parser.parse_args()

    present = set()
    if args.present is not None:
        lines = [line.split("#", 1)[0].strip() for line in args.present.read_text().splitlines()]
        present = {canonical(line) for line in lines if line}
    args.out.mkdir(parents=True, exist_ok=True)
    reqs = requirements()
    (args.out / "requirements.txt").write_text("\n".join(reqs) + "\n")
    packages = closure(reqs)
    (args.out / "closure.txt").write_text("".join(f"{n}=={v}\n" for n, v in packages))
    builder = build_interpreter(args.python_version, args.build_python) if args.python_version else None
    problems = []
    for name, version in packages:
        if canonical(name) not in present:
            problem = fetch(name, version, args.out, args.python_version, builder)
            if problem is not None:
                problems.append(f"{name}=={version}: {problem}")
            continue
        # The machine has it, perhaps at a version our pins do not accept (datasets caps fsspec, for
        # one): a small wheel rides along as a spare, which pip uses only if the machine's does not fit.
        with tempfile.TemporaryDirectory() as tmp:
            if fetch(name, version, Path(tmp), args.python_version, builder) is None:
                for wheel in Path(tmp).glob("*.whl"):
                    if wheel.stat().st_size < args.spare_mib * 2**20:
                        shutil.move(wheel, args.out / wheel.name)
    wheels = sorted(args.out.glob("*.whl"))
    size = sum(path.stat().st_size for path in wheels) / 2**20
    target = args.python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.out} for Python {target}")
    if problems:
        print("not fetched:\n  " + "\n  ".join(problems), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
