"""The dashboard in a real browser: headless Chromium (Debian's `chromium`, installed by .ci/run),
driven by Playwright for Python with the system browser (`executable_path`; Playwright's own
browser downloads are never used). One test opens the dashboard of a running 2-node swarm, one
the dashboard of a simulation report (served by `swarmp2p dashboard --from`, and as the static
`--html` report); each waits for the reward chart, asserts on what a person would read, and
saves a screenshot under the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmp2p.dashboard import peer_name
from tests.helpers.waiting import free_port, wait_for

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
CONFIG = """
[node]
round_seconds = 8.0
hello_interval_s = 1.0
questions_per_round = 1
n_local = 1
n_external = 2
warmup_steps = 0

[trainer]
tasks = ["basic_arithmetic", "calendar_arithmetic"]
tiny_hidden_size = 64
tiny_pretrain_steps = 0
threads = 1
max_new_tokens = 8
num_generations = 2
eval_every = 2
"""




def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


class Process:
    """A `swarmp2p` subcommand as an OS process, its output in a log file."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "swarmp2p.cli", *argv],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=ENV,
            cwd=log.parent,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_output(self, pattern: str, timeout_s: float = 120) -> re.Match[str]:
        regex = re.compile(pattern)

        def found() -> re.Match[str] | None:
            assert self.process.poll() is None, f"exited early:\n{self.output()}"
            return regex.search(self.output())

        return wait_for(found, timeout_s, f"{pattern!r} in {self.log}")

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    """The page at `url` once its reward chart has a line; the script errors it raised."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_selector("#chart path.series", state="attached", timeout=30_000)
    return page, errors


def table_texts(page: Any, body_id: str) -> list[str]:
    # One call in the page: the dashboard re-renders its tables on every poll, and a row read
    # after the re-render replaced it is detached, whose innerText has no tabs between cells.
    return page.eval_on_selector_all(f"#{body_id} tr", "rows => rows.map(row => row.innerText)")


def send_garbage_request(addr: str, target: str) -> str:
    """A throwaway libp2p peer sends `target` a fetch request that is not a message: the node
    counts it as a rejection (request_malformed) blamed on the sender, which the dashboard must
    show by reason and in the sender's row. Returns the sender's peer id."""
    import trio
    from libp2p.crypto.ed25519 import create_new_key_pair

    from swarmp2p.net import NetworkSettings, open_libp2p_network

    sender: list[str] = []

    async def poke() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(os.urandom(32)), NetworkSettings()) as net:
                sender.append(net.local_peer_id)
                await net.connect(addr)
                with trio.move_on_after(5):
                    await net.request(target, b"\x93garbage", 5)

    # trio in a thread of its own: Playwright's sync API keeps an event loop in this one.
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_catching(trio.run, poke, failure))
    thread.start()
    thread.join(90)
    if failure:
        raise failure[0]
    return sender[0]


def _run_catching(
    run: Callable[..., Any], function: Callable[..., Any], failure: list[BaseException]
) -> None:
    try:
        run(function)
    except BaseException as error:  # handed to the test's thread
        failure.append(error)


def test_dashboard_of_a_running_two_node_swarm(browser: Any, tmp_path: Path) -> None:
    config = tmp_path / "swarm.toml"
    config.write_text(CONFIG)
    port = free_port()
    first = Process(
        ["node", "--config", str(config), "--data-dir", str(tmp_path / "a"), "--dashboard-port", str(port)],
        tmp_path / "a.log",
    )
    processes = [first]
    try:
        addr = first.wait_output(r"listening on (/ip4/\S+)").group(1)
        url = first.wait_output(r"dashboard: (http://127\.0\.0\.1:\d+/)").group(1)
        second = Process(
            ["node", "--config", str(config), "--data-dir", str(tmp_path / "b"), "--bootstrap", addr],
            tmp_path / "b.log",
        )
        processes.append(second)
        first_id = get_json(url + "api/status")["peer_id"]
        second_id = wait_for(
            lambda: (
                (tmp_path / "b" / "node.json").exists()
                and json.loads((tmp_path / "b" / "node.json").read_text())["peer_id"]
            ),
            120,
            "the second node's node.json",
        )

        def swarmed() -> dict[str, Any] | None:
            status = get_json(url + "api/status")
            accepted = any(second_id in row.get("accepted_peers", []) for row in status["history"])
            return status if accepted and len(status["history"]) >= 2 else None

        wait_for(swarmed, 150, "a round in which the first node verified the second's batch")

        def fed() -> bool:
            rollouts = get_json(url + "api/status").get("rollouts", [])
            return any(e["peer_id"] == second_id and e["verdict"] == "verified" for e in rollouts)

        wait_for(fed, 60, "a verified rollout of the second node in the feed")
        poker = send_garbage_request(addr, first_id)
        status = wait_for(
            lambda: (s := get_json(url + "api/status"))["rejections"].get("request_malformed") and s,
            30,
            "the garbage request counted",
        )

        page, errors = open_page(browser, url)
        page.wait_for_function("document.getElementById('round').textContent !== '–'")
        page.wait_for_selector("#rejections >> text=request_malformed", timeout=15_000)
        shot = tmp_path / "swarm-dashboard.png"
        page.screenshot(path=str(shot), full_page=True)

        shown_round = int(page.inner_text("#round"))
        assert shown_round >= status["round"], (shown_round, status["round"])
        assert page.inner_text("#me_name") == peer_name(first_id)
        assert first_id in page.inner_text("#peer_id")
        body = page.inner_text("body")
        assert peer_name(second_id) in body, "the second peer's friendly name"
        board = table_texts(page, "leaderboard")
        assert any(peer_name(first_id) in row and "this node" in row for row in board), board
        # The second peer's reward as the first verified it (what winners are ranked by).
        assert any(peer_name(second_id) in row and re.search(r"\t\d\.\d{3}\t", row) for row in board), board
        contributions = table_texts(page, "contributions")
        assert any(peer_name(second_id) in row and "connected" in row for row in contributions), contributions
        assert any("request_malformed" in row for row in table_texts(page, "rejections"))
        poker_row = next(row for row in contributions if peer_name(poker) in row).split("\t")
        assert poker_row[3] == "1", poker_row  # rejected: the garbage request, blamed on its sender
        feed = [entry.inner_text() for entry in page.query_selector_all("#feed .entry")]
        assert any("verified" in entry and peer_name(second_id) in entry for entry in feed), feed
        assert any("local" in entry and peer_name(first_id) in entry for entry in feed), feed
        assert page.query_selector_all("#chart circle"), "reward points drawn"
        assert "no rounds yet" not in body
        assert page.inner_text("#swarm_id") == status["schedule"]["swarm_id"]
        assert re.fullmatch(r"\d+ s", page.inner_text("#countdown")), page.inner_text("#countdown")
        assert not errors, errors
        assert shot.stat().st_size > 10_000
        page.close()
    finally:
        codes = [process.stop() for process in processes]
    assert codes == [0] * len(processes), "\n".join(p.output()[-3000:] for p in processes)


def simulate(tmp_path: Path) -> Path:
    out = tmp_path / "sim"
    args = ["simulate", "--peers", "8", "--rounds", "12", "--seed", "3", "--scenario", "byzantine10"]
    completed = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", *args, "--out", str(out), "--no-plots"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return out / "report.json"


def check_report_page(page: Any, report: dict[str, Any]) -> None:
    """What a person must read on a simulation report's dashboard."""
    body = page.inner_text("body")
    assert "no rounds yet" not in body
    assert "none yet" not in body  # a finished report's empty tables never fill: "none in this ..."
    assert not re.search(r"\{'|\{\"|\[\{", body), "a raw Python dict or JSON on the page"
    assert page.inner_text("#round") == str(report["rounds"][-1]["round"])
    assert page.inner_text("#phase") == "finished"
    # The swarm's mean per round, and the solo baseline's (the same peers with no sharing) dashed.
    series = 2 if report.get("solo") else 1
    assert len(page.query_selector_all("#chart circle")) == series * len(report["rounds"])
    assert report.get("solo") and "solo mean" in (page.text_content("#chart") or "")
    board = table_texts(page, "leaderboard")
    assert len(board) == len(report["peers"])
    for peer in report["peers"]:
        assert any(peer_name(peer["peer_id"]) in row for row in board), (peer["peer_id"], board)
    rejections = table_texts(page, "rejections")
    for reason, count in report["summary"]["rejections"].items():
        assert any(reason in row and str(count) in row for row in rejections), (reason, rejections)
    assert "simulated learner" in page.inner_text("#summary")
    # The rejected column shows the real count of each round.
    rows = {int(row.split("\t")[0]): row.split("\t") for row in table_texts(page, "rounds")}
    last = report["rounds"][-1]
    assert rows[last["round"]][4] == str(sum(last["rejected"].values()))


def test_dashboard_of_a_simulation_report_served_and_static(browser: Any, tmp_path: Path) -> None:
    report_path = simulate(tmp_path)
    report = json.loads(report_path.read_text())
    server = Process(["dashboard", "--from", str(report_path), "--port", "0"], tmp_path / "dashboard.log")
    try:
        url = server.wait_output(r"dashboard on (http://127\.0\.0\.1:\d+/)", 60).group(1)
        page, errors = open_page(browser, url)
        page.wait_for_function("document.getElementById('round').textContent !== '–'")
        page.screenshot(path=str(tmp_path / "report-dashboard.png"), full_page=True)
        check_report_page(page, report)
        assert not errors, errors
        page.close()
    finally:
        assert server.stop() == 0, server.output()

    static = tmp_path / "report.html"
    written = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarmp2p.cli",
            "dashboard",
            "--from",
            str(report_path),
            "--html",
            str(static),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert written.returncode == 0, written.stderr
    page, errors = open_page(browser, static.as_uri())
    page.screenshot(path=str(tmp_path / "report-static.png"), full_page=True)
    check_report_page(page, report)
    assert page.inner_text("#state") == "static report"
    assert not errors, errors
    page.close()
