"""Import structure: the layers point one way, no module circle anywhere, and rooms that fit.

Layers, each importing only those before it: protocol/ (pure rules), trainer/ (GRPO, no
networking), swarmp2p/ (the node: peer, network, chain, CLI), simulator/ (runs the same Peer over a
virtual network), bench/ (measures all of them). No runtime module imports bench/, tests/ or
netlab/.

A circle (trainer/policy.py imported trainer/warmup.py, which imported trainer/policy.py for a type)
is counted even when one side hides it in a function body or under TYPE_CHECKING: such a circle
works only as long as nobody moves an import, and it says two modules are really one.

A runtime module over 600 lines says why at its top (a docstring or comment line starting
"Over 600 lines:"), so that a long file is a decision someone wrote down, not drift.
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


# Each layer may import the ones before it, never one after it.
LAYERS = ("protocol", "trainer", "swarmp2p", "simulator", "bench")
RUNTIME = ("protocol", "trainer", "swarmp2p", "simulator")
# bench/ holds scripts run as `python bench/x.py`: they import each other by bare name.
SCRIPT_FOLDERS = ("bench",)


def all_modules() -> dict[str, Path]:
    """Every module of the layers, by dotted name (bench/x.py is `bench.x`)."""
    return {
        module_name(path): path
        for package in LAYERS
        for path in (ROOT / package).rglob("*.py")
        if "fixtures" not in path.relative_to(ROOT).parts
    }


def targets_of(path: Path, modules: dict[str, Path]) -> set[str]:
    return targets_in(path.read_text(), module_name(path), modules)


def targets_in(source: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that `source` (module `importer`) imports anywhere in its body.
    `from pkg import sub` counts as importing the submodule `pkg.sub` (the package is only the way
    in, and every submodule loads its package first anyway); `from pkg import name` counts as
    importing `pkg`. In a script folder a bare `import x` is the folder's `x.py`."""
    folder = importer.split(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    resolved = set()
    for name in found:
        if folder in SCRIPT_FOLDERS and f"{folder}.{name}" in modules:
            name = f"{folder}.{name}"
        if name in modules and name != importer:
            resolved.add(name)
    return resolved


def whole_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: targets_of(path, modules) for name, path in modules.items()}


def test_the_whole_graph_sees_the_layers_and_the_bench_scripts() -> None:
    edges = whole_graph()
    assert {name.split(".")[0] for name in edges} == set(LAYERS)
    assert "protocol.messages" in edges["simulator.runner"]
    assert "bench.procfs" in edges["bench.bench_network"]  # a bare `import procfs`


def test_from_a_package_import_a_submodule_is_an_edge_to_the_submodule() -> None:
    modules = {name: Path(name) for name in ("pkg", "pkg.sub", "pkg.other", "bench.tool", "tool")}
    source = "from pkg import sub\n\ndef late():\n    from pkg.other import thing\n"
    assert targets_in(source, "app", modules) == {"pkg.sub", "pkg.other"}
    assert targets_in("from pkg import name\n", "pkg.sub", modules) == {"pkg"}  # a re-export: the package
    assert targets_in("import tool\n", "bench.x", modules) == {"bench.tool"}  # a bench script's neighbour
    assert targets_in("import tool\n", "app", modules) == {"tool"}


def test_no_import_circle_anywhere() -> None:
    """Across protocol/, trainer/, swarmp2p/, simulator/ and bench/ together."""
    assert find_cycle(whole_graph()) is None


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_no_layer_above_it(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in whole_graph().items()
        if name.split(".")[0] == layer
        for target in targets
        if target.split(".")[0] in above
    )
    assert wrong == []


# swarmp2p/'s rooms that plug into the node from outside: each stands behind a port (net/ and
# chain/) or reads what the node publishes (dashboard/).
ADAPTERS = ("swarmp2p.net", "swarmp2p.chain", "swarmp2p.dashboard")


def room_of(module: str) -> str | None:
    return next((room for room in ADAPTERS if module == room or module.startswith(room + ".")), None)


def test_the_adapters_import_neither_one_another_nor_the_node_or_its_commands() -> None:
    """The network and chain adapters and the dashboard are independent plug-ins: none imports
    another, and none reaches up into the node's assembly (swarmp2p/node*.py) or the CLI
    (swarmp2p/cli*.py), which put them together."""
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in whole_graph().items()
        if (room := room_of(name)) is not None
        for target in targets
        if (room_of(target) not in (None, room))
        or target.startswith(("swarmp2p.node", "swarmp2p.cli"))
    )
    assert wrong == []


def test_the_runtime_imports_neither_tests_nor_netlab_nor_bench() -> None:
    wrong = sorted(
        str(path.relative_to(ROOT))
        for layer in RUNTIME
        for path in (ROOT / layer).rglob("*.py")
        for outside in ("tests", "netlab", "bench")
        if imports_of(path, outside)
    )
    assert wrong == []


LINE_LIMIT = 600
REASON = "Over 600 lines:"


def reason_at_top(source: str) -> str | None:
    """The text after "Over 600 lines:" on a line of the module's opening docstring or of the
    comments above it; None when there is none (or it is empty)."""
    lines = source.splitlines()
    tree = ast.parse(source)
    first_code = tree.body[0] if tree.body else None
    end = len(lines)
    if first_code is not None:
        docstring = ast.get_docstring(tree, clean=False) is not None
        end = first_code.end_lineno if docstring else first_code.lineno - 1
    for line in lines[: end or 0]:
        text = line.strip().lstrip("#").strip().strip('"').strip()
        if text.startswith(REASON) and text[len(REASON) :].strip():
            return text[len(REASON) :].strip()
    return None


def test_the_reason_is_read_from_the_top_only() -> None:
    docstring = '"""Title.\n\nOver 600 lines: one table of cases.\n"""\nx = 1\n'
    assert reason_at_top(docstring) == "one table of cases."
    assert reason_at_top("# Over 600 lines: generated.\nx = 1\n") == "generated."
    assert reason_at_top('"""Title."""\nx = 1\n# Over 600 lines: too late.\n') is None
    assert reason_at_top('"""Over 600 lines:"""\n') is None  # a reason, not just the words


def test_no_runtime_module_is_over_600_lines_without_a_reason_at_its_top() -> None:
    long = {
        str(path.relative_to(ROOT)): length
        for layer in RUNTIME
        for path in (ROOT / layer).rglob("*.py")
        if (length := len(path.read_text().splitlines())) > LINE_LIMIT
    }
    unexplained = sorted(
        f"{name} ({length} lines)"
        for name, length in long.items()
        if reason_at_top((ROOT / name).read_text()) is None
    )
    assert unexplained == []


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
