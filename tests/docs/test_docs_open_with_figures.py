"""A reader of any doc page sees what to run and the current figures in one table within the
page's first screen, and docs/benchmarks.md stays a page of current figures (its dated history
lives in docs/lab/), not a lab notebook."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
FIRST_SCREEN = 40  # lines
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def first_table(text: str) -> tuple[int, list[list[str]]] | None:
    """(line number of its header, its rows as cells) of the page's first markdown table."""
    lines = text.splitlines()
    for at, (head, rule) in enumerate(itertools.pairwise(lines)):
        if head.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rule.strip()):
            rows = []
            for line in lines[at:]:
                if not line.startswith("|"):
                    break
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            return at + 1, [rows[0], *rows[2:]]
    return None


@pytest.mark.parametrize("page", USER_PAGES, ids=[p.relative_to(REPO).as_posix() for p in USER_PAGES])
def test_every_page_shows_a_table_on_its_first_screen(page: Path) -> None:
    found = first_table(page.read_text())
    assert found is not None, f"{page.name} has no table"
    assert found[0] <= FIRST_SCREEN, f"{page.name}'s first table starts at line {found[0]}"


def test_benchmarks_is_a_page_of_current_figures() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "lab/benchmarks-history.md" in text  # the history is linked, not inline
    found = first_table(text)
    assert found is not None
    header, *rows = found[1]
    assert {"what", "command", "measured"} <= {cell.lower() for cell in header}
    measured = [cell.lower() for cell in header].index("measured")
    for row in rows:
        assert DATE.fullmatch(row[measured]) or not row[measured], row  # one date: the latest


def test_first_table_reads_a_table_and_ignores_prose() -> None:
    text = "# T\n\na | b\n\n| what | measured |\n|---|:--:|\n| x | 2026-11-30 |\n\nafter\n"
    assert first_table(text) == (5, [["what", "measured"], ["x", "2026-11-30"]])
    assert first_table("# T\n\nno table | here\n") is None
