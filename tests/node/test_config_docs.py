"""Every TOML example in docs/configuration.md is accepted by the config loader (its own example
once said `rounds = 50`, a key no command has), and `node --help` shows the defaults."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import swarmp2p.cli  # registers every command's config class
import swarmp2p.node_config  # [node]: imported by `swarmp2p node` only when it runs
from swarmp2p.config import REGISTRY, load_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOML_BLOCKS = re.findall(r"```toml\n(.*?)```", (DOCS / "configuration.md").read_text(), re.S)


def test_the_doc_has_toml_examples() -> None:
    assert TOML_BLOCKS


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=[f"example-{i}" for i in range(len(TOML_BLOCKS))])
def test_every_toml_example_of_the_configuration_doc_loads(tmp_path: Path, block: str) -> None:
    path = tmp_path / "swarm.toml"
    path.write_text(block)
    sections = tomllib.loads(block)
    REGISTRY.import_lazy()  # [trainer] is registered lazily
    known = REGISTRY.sections()
    assert sections, block
    for section in sections:
        assert section in known, f"[{section}] is no command's section"
        load_config(known[section], section=section, file=path, env={})


def test_node_help_shows_the_defaults() -> None:
    done = CliRunner().invoke(swarmp2p.cli.app, ["node", "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    for default in ("default: .swarmp2p", "default: 30", "default: tiny", "default: info", "default: 5"):
        assert default in text, (default, done.output)


def test_node_help_gives_every_option_a_default_and_keeps_its_brackets() -> None:
    """Each flag of `node --help` says its default, and rich markup eats no `[section]` (the
    --threads help once read "default:  threads, else all cores")."""
    import click
    import typer.main

    command = typer.main.get_command(swarmp2p.cli.app).commands["node"]
    for param in command.params:
        if isinstance(param, click.Option) and "--help" not in param.opts:
            assert "default" in (param.help or ""), (param.opts, param.help)
    done = CliRunner().invoke(swarmp2p.cli.app, ["node", "--help"], env={"COLUMNS": "200"})
    text = " ".join(done.output.split())
    assert "default: [trainer] threads" in text, done.output
