"""A headless chromium for the dashboard's browser tests (the `browser` fixture)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def launched_browser() -> Iterator[Any]:
    """Chromium launched for a module's tests (tests/conftest.py serves it as `browser`)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install -e '.[test]' installs playwright"
    )
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian package `chromium`; .ci/run installs it)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()
