"""The busy-host pace on the dashboard: a node's status carries its pace (swarmp2p/round_pace.py),
the view says it ("normal", or "busy host: 1 thread, 2/4 questions ..." since which round), the
served /api/status carries it, and the page shows it in a card (a report without a pace hides it).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from swarmp2p.dashboard import build_view, normalize_status, write_html_report
from swarmp2p.round_pace import Pace, RoundTimes
from tests.dashboard.test_dashboard import with_dashboard

OVERRAN = RoundTimes(0, 10_000, 1_000, 6_000, 12_000)  # training ended 2 s after the round


def paced(overruns: int) -> dict[str, Any]:
    """A node's pace status (4 questions, 4 + 4 groups, 2 threads) after `overruns` rounds in a
    row that overran, from round 10 on."""
    pace = Pace(threads=2)
    for offset in range(overruns):
        pace.observe(10 + offset, OVERRAN)
    return pace.status(questions=4, n_local=4, n_external=4)


def node_status(pace: dict[str, Any] | None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "peer_id": "12D3KooWme",
        "round": 16,
        "phase": "collecting",
        "history": [{"round": 15, "reward": 0.2, "rollouts_in": 8, "rollouts_out": 4}],
    }
    if pace is not None:
        status["pace"] = pace
    return status


def test_the_view_says_normal_at_full_pace() -> None:
    view = build_view(normalize_status(node_status(paced(overruns=1))))  # one overrun changes nothing
    assert view["pace"] == {
        "busy": False,
        "label": "normal",
        "detail": "2 threads, all 4 questions, 4 + 4 groups",
        "since_round": None,
    }


def test_the_view_says_busy_host_with_what_the_node_does_now_and_since_when() -> None:
    threads_only = build_view(normalize_status(node_status(paced(overruns=2))))["pace"]
    assert threads_only["busy"] and threads_only["label"] == "busy host"
    assert threads_only["detail"].startswith("1 thread, 4/4 questions, 4 + 4 groups · since round 12 · ")
    halved = build_view(normalize_status(node_status(paced(overruns=4))))["pace"]
    assert halved["detail"] == (
        "1 thread, 2/4 questions, 2 + 2 groups · since round 14 · generate + train overran 2 rounds in a row"
    )
    assert halved["since_round"] == 14


def test_a_status_without_a_pace_or_with_a_broken_one_has_none() -> None:
    assert build_view(normalize_status(node_status(None)))["pace"] is None  # a report, an experiment
    assert build_view(normalize_status(node_status({"level": "high"})))["pace"] is None


def test_the_served_status_carries_the_pace_and_its_view() -> None:
    status = node_status(paced(overruns=4))

    def check(base: str) -> None:
        with urllib.request.urlopen(base + "/api/status", timeout=10) as response:
            body = json.loads(response.read())
        assert body["pace"]["level"] == 2 and body["pace"]["questions"] == 2
        assert body["view"]["pace"]["label"] == "busy host"

    with_dashboard(lambda: status, check)


def test_the_page_shows_the_pace_card_and_hides_it_without_a_pace(browser: Any, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    busy = write_html_report(node_status(paced(overruns=4)), tmp_path / "busy.html")
    page.goto(busy.as_uri())
    page.wait_for_function("document.getElementById('pace').textContent !== '–'")
    page.screenshot(path=str(tmp_path / "busy.png"))
    assert page.is_visible("#pace_card")
    assert page.inner_text("#pace") == "busy host"
    assert "warn" in (page.get_attribute("#pace", "class") or "")
    note = page.inner_text("#pace_note")
    assert "1 thread, 2/4 questions, 2 + 2 groups" in note and "since round 14" in note
    normal = write_html_report(node_status(paced(overruns=0)), tmp_path / "normal.html")
    page.goto(normal.as_uri())
    page.wait_for_function("document.getElementById('pace').textContent === 'normal'")
    assert "warn" not in (page.get_attribute("#pace", "class") or "")
    assert page.inner_text("#pace_note") == "2 threads, all 4 questions, 4 + 4 groups"
    report = write_html_report(node_status(None), tmp_path / "report.html")
    page.goto(report.as_uri())
    page.wait_for_function("document.getElementById('round').textContent === '16'")
    assert not page.is_visible("#pace_card")
    assert not errors, errors
    page.close()
