"""The dashboard answers from published snapshots on its own thread: a node whose trio loop is
busy (blocked, flooded) still gets its `/api/status`, `/metrics` and `/healthz` answered at once,
from a snapshot whose age says how old it is."""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import trio

from swarmp2p.dashboard.snapshot import SnapshotHolder, StatusPublisher
from swarmp2p.dashboard.status import StatusUnavailable
from swarmp2p.dashboard.thread_server import serve_dashboard_in_thread

BLOCK_S = 2.0


def _get(url: str) -> tuple[float, bytes]:
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = answer.read()
    return time.monotonic() - started, body


def test_status_answers_within_half_a_second_while_the_trio_loop_is_blocked() -> None:
    rounds = {"round": 0}

    def status() -> dict[str, Any]:
        rounds["round"] += 1
        return {"peer_id": "peer-a", "round": rounds["round"], "peers": ["b"], "counters": {"x": 1}}

    answers: list[tuple[float, dict[str, Any]]] = []
    metrics: list[tuple[float, bytes]] = []

    async def main() -> None:
        publisher = StatusPublisher(status, interval_s=0.1)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            port = await nursery.start(serve_dashboard_in_thread, publisher.status)
            await trio.sleep(0.3)  # a few snapshots on the steady cadence
            url = f"http://127.0.0.1:{port}"

            def ask_while_blocked() -> None:
                time.sleep(0.5)  # the loop is blocked by now
                took, body = _get(url + "/api/status")
                answers.append((took, json.loads(body)))
                metrics.append(_get(url + "/metrics"))

            # The client runs on a plain thread: the trio loop cannot serve anything meanwhile.
            client = threading.Thread(target=ask_while_blocked)
            client.start()
            time.sleep(BLOCK_S)  # a synchronous stall of the node's only trio thread
            client.join()
            nursery.cancel_scope.cancel()

    trio.run(main)
    [(took, body)] = answers
    assert took < 0.5
    assert body["peer_id"] == "peer-a" and body["peer_count"] == 1 and "view" in body
    # Asked 0.5 s into the block: the snapshot is from just before it, and says so.
    assert 0.4 <= body["status_age_s"] <= 1.0
    [(metrics_took, text)] = metrics
    assert metrics_took < 0.5
    assert b"swarmp2p_status_up 1.0" in text
    assert b"swarmp2p_status_age_seconds" in text


def test_an_idle_node_answers_with_its_state_of_the_moment_of_the_request() -> None:
    state = {"round": 1}
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        publisher = StatusPublisher(lambda: dict(state), interval_s=60.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            port = await nursery.start(serve_dashboard_in_thread, publisher.status)
            state["round"] = 7  # after the last cadence's snapshot, before the request
            _took, body = await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{port}/api/status")
            seen.append(json.loads(body))
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen[0]["round"] == 7 and seen[0]["status_age_s"] < 0.5


def test_snapshots_are_rebuilt_on_the_cadence_and_at_once_on_refresh() -> None:
    built: list[float] = []

    def status() -> dict[str, Any]:
        built.append(time.monotonic())
        return {"round": len(built)}

    async def main() -> None:
        publisher = StatusPublisher(status, interval_s=10.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            assert publisher.holder.status()["round"] == 1
            publisher.refresh()
            await trio.sleep(0.05)
            assert publisher.holder.status()["round"] == 2
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_published_snapshot_does_not_change_when_the_node_mutates_its_state() -> None:
    live = {"round": 1, "history": [{"round": 1, "reward": 0.5}], "counters": {"a": 1}}

    async def main() -> dict[str, Any]:
        publisher = StatusPublisher(lambda: live)
        await publisher.publish_once()
        live["history"].append({"round": 2, "reward": 0.7})
        live["counters"]["a"] = 5
        return publisher.holder.status()

    served = trio.run(main)
    assert [row["round"] for row in served["history"]] == [1]
    assert served["counters"] == {"a": 1}


def test_a_failing_source_is_unavailable_with_its_error_and_healthz_says_503() -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("peer gone")

    async def main() -> tuple[int, dict[str, Any]]:
        publisher = StatusPublisher(broken)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            port = await nursery.start(serve_dashboard_in_thread, publisher.status)
            try:
                await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{port}/healthz")
            except urllib.error.HTTPError as error:
                code, body = error.code, json.loads(error.read())
            nursery.cancel_scope.cancel()
        return code, body

    code, body = trio.run(main)
    assert code == 503 and "peer gone" in body["error"]
    assert body["ok"] is False
    with pytest.raises(StatusUnavailable, match="no status"):
        SnapshotHolder().status()


def test_the_server_thread_stops_with_its_task_and_frees_the_port() -> None:
    async def main() -> int:
        holder = SnapshotHolder()
        async with trio.open_nursery() as nursery:
            port = await nursery.start(functools.partial(serve_dashboard_in_thread, holder.status))
            nursery.cancel_scope.cancel()
        return port

    port = trio.run(main)
    assert not [t for t in threading.enumerate() if t.name == "swarmp2p-dashboard"]
    with pytest.raises(OSError):
        _get(f"http://127.0.0.1:{port}/healthz")
