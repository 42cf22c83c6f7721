"""Import structure: no module circle inside a layer, and the simulate command outside the runtime.

A circle (trainer/policy.py imported trainer/warmup.py, which imported trainer/policy.py for a type)
is counted even when one side hides it in a function body or under TYPE_CHECKING: such a circle
works only as long as nobody moves an import, and it says two modules are really one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> set[str]:
    """Every module of `package` that `path` imports anywhere (top level, function bodies,
    TYPE_CHECKING blocks), as dotted names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == package or name.startswith(package + ".")}


def graph(package: str) -> dict[str, set[str]]:
    modules = {module_name(path): path for path in (ROOT / package).rglob("*.py")}
    return {
        name: {target for target in imports_of(path, package) if target in modules and target != name}
        for name, path in modules.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["trainer", "protocol"])
def test_no_import_circle_in(package: str) -> None:
    assert find_cycle(graph(package)) is None


def test_warmup_does_not_import_the_policy() -> None:
    assert "trainer.policy" not in imports_of(ROOT / "trainer" / "warmup.py", "trainer")


def test_the_runtime_never_imports_the_simulator() -> None:
    # The simulator imports the runtime (it runs the same Peer); the other way round would be a
    # circle between layers. Its commands live in simulator/ and the CLI root names them by string.
    importers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "swarmp2p").rglob("*.py")
        if imports_of(path, "simulator")
    ]
    assert importers == []


def test_the_cli_root_loads_the_simulator_commands_without_the_simulator() -> None:
    import subprocess
    import sys

    code = (
        "import sys, swarmp2p.cli\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'simulator')\n"
        "print(loaded)\n"
        "assert loaded == ['simulator', 'simulator.cli_experiment', 'simulator.cli_simulate'], loaded\n"
        "names = {c.name for c in swarmp2p.cli.app.registered_commands}\n"
        "assert 'simulate' in names, names\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
