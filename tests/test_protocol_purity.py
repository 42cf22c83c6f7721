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
    assert {"protocol.codec", "protocol.envelope", "protocol.rounds", "protocol.verification"} <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    leaked = [name for name in loaded if name.split(".")[0] in FORBIDDEN]
    assert leaked == []
