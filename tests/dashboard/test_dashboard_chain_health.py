"""A chain node whose submissions keep failing shows it on the dashboard's first screen (a card,
not only a counter in the collapsed Counters table), with the last error; a healthy one shows
how many are on chain; a chain-less node shows no card. Headless Chromium on the static page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swarmp2p.dashboard.app import write_html_report

HISTORY = [{"round": r, "reward": 0.5, "rollouts_in": 1, "rollouts_out": 2, "rejected": 0} for r in range(3)]


def _status(chain: dict[str, Any] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"peer_id": "12D3KooWme", "round": 3, "phase": "collect", "history": HISTORY}
    if chain is not None:
        status["chain"] = chain
    return status


def _card(browser: Any, tmp_path: Path, name: str, chain: dict[str, Any] | None) -> tuple[bool, str, str]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(write_html_report(_status(chain), tmp_path / f"{name}.html").as_uri())
    page.wait_for_selector("#chart path.series", state="attached", timeout=30_000)
    assert not errors, errors
    shown = page.is_visible("#chain_card")
    value = page.inner_text("#chain_subs") if shown else ""
    note = page.inner_text("#chain_note") if shown else ""
    klass = page.get_attribute("#chain_subs", "class") or ""
    page.close()
    return shown, value, note + ("|bad" if "bad" in klass else "")


def test_failing_submissions_are_on_the_first_screen(browser: Any, tmp_path: Path) -> None:
    failing = {"submitted": 4, "already_on_chain": 0, "late_skipped": 1, "failed": 7,
               "failing_in_a_row": 7, "last_error": "insufficient funds for gas"}  # fmt: skip
    shown, value, note = _card(browser, tmp_path, "failing", failing)
    assert shown and value == "7 failing in a row"
    assert "insufficient funds for gas" in note and note.endswith("|bad")


def test_healthy_and_chain_less_nodes(browser: Any, tmp_path: Path) -> None:
    healthy = {"submitted": 12, "already_on_chain": 1, "late_skipped": 2, "failed": 0,
               "failing_in_a_row": 0, "last_error": ""}  # fmt: skip
    shown, value, note = _card(browser, tmp_path, "healthy", healthy)
    assert shown and value == "12 on chain" and not note.endswith("|bad")
    assert "2 late" in note
    assert _card(browser, tmp_path, "none", None)[0] is False
