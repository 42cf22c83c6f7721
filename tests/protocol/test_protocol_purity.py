"""The protocol package stays sans-IO: importing all of it pulls in no runtime stack."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import protocol

FORBIDDEN = (
    "trio",
    "libp2p",
    "torch",
    "web3",
    "transformers",
    "reasoning_gym",
    "swarmp2p",
    "simulator",
    "trainer",
)


def test_protocol_imports_no_runtime_stack():
    modules = sorted(f"protocol.{info.name}" for info in pkgutil.iter_modules(protocol.__path__))
    assert {
        "protocol.admission",
        "protocol.codec",
        "protocol.envelope",
        "protocol.game",
        "protocol.rounds",
        "protocol.seeds",
        "protocol.verification",
    } <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    leaked = [name for name in loaded if name.split(".")[0] in FORBIDDEN]
    assert leaked == []


def test_the_core_reads_no_clock_and_does_no_io() -> None:
    """The round machine, the admission inbox and the game take time and bytes as arguments:
    no clock, randomness, file, socket or thread module is imported by them."""
    import ast
    from pathlib import Path

    banned = {"time", "datetime", "random", "socket", "os", "threading", "asyncio", "subprocess", "io"}
    for name in ("rounds", "admission", "game", "seeds"):
        tree = ast.parse((Path(protocol.__file__).parent / f"{name}.py").read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not imported & banned, (name, imported & banned)
