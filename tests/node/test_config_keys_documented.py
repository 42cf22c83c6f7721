"""Every key of every command's config class has a row in docs/configuration.md's "Every key"
tables, with the class's own default: a key added, renamed or given a new default without its row
fails here, and so does a row for a key no class has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

import swarmp2p.cli
import swarmp2p.node_config
from swarmp2p.config import REGISTRY, _to_toml

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(?P<key>[a-z_0-9]+)` \| (?P<default>[^|]+?) \| (?P<what>[^|].*?) \|$")


def documented(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    """{section: {key: (default cell, what cell)}} from the "## Every key" part of `text`."""
    part = text.split("\n## Every key\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, tuple[str, str]]] = {}
    section = None
    for line in part.splitlines():
        if heading := re.match(r"^### `\[(\w+)\]`", line):
            section = heading.group(1)
            tables[section] = {}
        elif section is not None and (row := ROW.match(line)):
            tables[section][row["key"]] = (row["default"].strip(), row["what"].strip())
    return tables


def default_cell(value: Any) -> str:
    """How the doc writes a default: its TOML form in backticks, or `unset` for None."""
    value = _to_toml(value)
    return "unset" if value is None else f"`{json.dumps(value)}`"


def class_defaults(cls: type) -> dict[str, Any]:
    defaults = {}
    for field in attrs.fields(cls):
        if field.init:
            default = field.default
            defaults[field.name] = default.factory() if isinstance(default, attrs.Factory) else default
    return defaults


def sections() -> dict[str, type]:
    REGISTRY.import_lazy()  # [trainer] is registered lazily
    return REGISTRY.sections()


def test_the_parser_reads_rows_and_sections() -> None:
    text = (
        "x\n## Every key\n### `[a]` (cmd)\n| key | default | what |\n|---|---|---|\n"
        "| `k_1` | `3` | three |\n## Next\n| `k_2` | `4` | not in the part |\n"
    )
    assert documented(text) == {"a": {"k_1": ("`3`", "three")}}
    assert default_cell(None) == "unset" and default_cell(("a", "b")) == '`["a", "b"]`'


def test_every_registered_section_has_a_table() -> None:
    assert set(documented(DOC.read_text())) == set(sections())


@pytest.mark.parametrize("section", sorted(sections()))
def test_each_key_has_a_row_with_its_default_and_a_line(section: str) -> None:
    rows = documented(DOC.read_text())[section]
    defaults = class_defaults(sections()[section])
    assert list(rows) == list(defaults), "rows in the class's order, one per key, no stale ones"
    wrong = {
        key: (rows[key][0], default_cell(value))
        for key, value in defaults.items()
        if rows[key][0] != default_cell(value)
    }
    assert wrong == {}, "documented default != the class's"
    assert all(what for _, what in rows.values())


def test_the_nodes_own_trainer_defaults_are_named() -> None:
    text = DOC.read_text().split("### `[trainer]`", 1)[1].split("| key |", 1)[0]
    for key in swarmp2p.node_config.NODE_TRAINER_DEFAULTS:
        assert f"`{key}" in text, key
