"""Every relative link of README.md and docs/ (lab notebooks included) reaches a file that exists,
and every `#anchor` a heading of the page it points at, as GitHub renders them: a reader who
follows a link from a figures table to its history must land on it."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
USER_PAGES = [page for page in PAGES if "lab" not in page.relative_to(REPO).parts]
SOURCE_PATH = re.compile(
    r"(?<![\w/.-])((?:swarmp2p|protocol|trainer|simulator|tests|bench|scripts|netlab|interop)/[\w./-]+\.(?:py|c|sh))\b"
)

LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _prose_lines(text: str, keep_code: bool = False) -> list[str]:
    """The page's lines outside fenced code blocks, with inline code removed unless
    `keep_code` (a link shown as code is an example, not a link; a heading keeps its code)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line if keep_code else INLINE_CODE.sub("", line))
    return lines


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup and punctuation dropped, lower case,
    spaces to hyphens (letters, digits, `-` and `_` kept)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
        elif char == " ":
            kept.append("-")
    return "".join(kept)


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(page.read_text(), keep_code=True):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """The page's relative links whose file or anchor does not exist, one line each."""
    broken = []
    for line in _prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor.lower() not in anchors(linked):
                broken.append(f"{target}: no heading with that anchor in {linked.name}")
    return broken


def test_the_pages_are_found() -> None:
    names = {page.relative_to(REPO).as_posix() for page in PAGES}
    assert {"README.md", "docs/benchmarks.md", "docs/node.md", "docs/reliability.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_relative_link_reaches_its_file_and_anchor(page: Path) -> None:
    assert broken_links(page) == []


# Files a page names on purpose as removed, and what replaced them.
REMOVED = {"scripts/mutants.py": "scripts/mutation.sh (mutmut)"}


def missing_source_paths(text: str) -> list[str]:
    """The repository files a page names (`swarmp2p/node.py`, `tests/net/test_x.py`, ...) that
    do not exist: a page that still names a moved or deleted file."""
    named = set(SOURCE_PATH.findall(text)) - REMOVED.keys()
    return sorted(path for path in named if not (REPO / path).exists())


@pytest.mark.parametrize("page", USER_PAGES, ids=[p.relative_to(REPO).as_posix() for p in USER_PAGES])
def test_every_source_file_a_page_names_exists(page: Path) -> None:
    """The lab notebooks are history, kept verbatim: the files they name may have moved since."""
    assert missing_source_paths(page.read_text()) == []


def test_the_path_check_finds_a_moved_file() -> None:
    text = "see `tests/test_readme.py` and tests/project/test_readme.py, run `python bench/bench_all.py`"
    assert missing_source_paths(text) == ["tests/test_readme.py"]
    assert missing_source_paths("docs/lab/x.py is not source; neither is my-swarmp2p/x.py") == []
    assert missing_source_paths("scripts/mutants.py is gone") == []  # named as removed
    assert all((REPO / replacement.split()[0]).exists() for replacement in REMOVED.values())


def test_the_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "history.md").write_text("# History\n\n## Run of 2026-11-30 (`bench`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Figures\n\n"
        "[ok](lab/history.md#run-of-2026-11-30-bench) [self](#figures) [web](https://x.org/y)\n"
        "[gone](lab/nothing.md) [bad anchor](lab/history.md#run-of-2026-12-01)\n"
        "`[code](not/a/link.md)`\n```\n[fenced](also/not.md)\n```\n"
    )
    assert broken_links(page) == [
        "lab/nothing.md: no such file",
        "lab/history.md#run-of-2026-12-01: no heading with that anchor in history.md",
    ]


def test_slugs_follow_github(tmp_path: Path) -> None:
    assert github_slug("Held-out evaluation: is it learning?") == "held-out-evaluation-is-it-learning"
    assert github_slug("The GRPO step (`TrainerPolicy.train`)") == "the-grpo-step-trainerpolicytrain"
    assert github_slug("When sharing pays: settings (2026-12-01)") == "when-sharing-pays-settings-2026-12-01"
    page = tmp_path / "p.md"
    page.write_text("# A\n\n## Measured\n\n## Measured\n")
    assert anchors(page) == {"a", "measured", "measured-1"}
