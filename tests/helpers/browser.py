"""A headless chromium for the dashboard's browser tests (the `browser` fixture)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="pip install -e '.[test]' installs playwright"
    )
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian package `chromium`; .ci/run installs it)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()
