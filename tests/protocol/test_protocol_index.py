"""protocol/__init__'s docstring is the core's module index: it names every module of protocol/,
so a reader finds each rule's file from one place."""

from __future__ import annotations

import re
from pathlib import Path

import protocol

PROTOCOL = Path(protocol.__file__).parent


def test_the_index_names_every_module() -> None:
    modules = {path.stem for path in PROTOCOL.glob("*.py")} - {"__init__"}
    index = [line for line in (protocol.__doc__ or "").splitlines() if line.startswith("    ")]
    named = {name for line in index for name in re.findall(r"(?:^ {4}| {2})(\w+)(?= )", line)}
    assert modules - named == set()
