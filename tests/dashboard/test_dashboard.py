"""swarmp2p.dashboard served for real (hypercorn under trio on 127.0.0.1:0), plus `swarmp2p dashboard`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from swarmp2p.cli_dashboard import FileStatusSource, UrlStatusSource
from swarmp2p.dashboard import StatusUnavailable, normalize_status, serve_dashboard

STATUS = {
    "peer_id": "12D3KooWExample<script>",
    "round": 7,
    "phase": "train",
    "peers": ["12D3KooWa", "12D3KooWb", "12D3KooWc"],
    "history": [
        {"round": 5, "reward": 0.25, "rollouts_in": 12, "rollouts_out": 4, "rejected": 1},
        {"round": 6, "reward": 0.5, "rollouts_in": 10, "rollouts_out": 4, "rejected": 0},
    ],
    "counters": {"batches_rejected.bad_signature": 3, "messages_in_total": 120},
}


def http_get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """Blocking GET (or `method`) returning (status, headers, body) for any status code."""
    try:
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def with_dashboard(source, check) -> None:
    """Serve `source` on 127.0.0.1:0, run blocking `check(base_url)` in a thread, then stop."""

    async def main() -> None:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                port = await nursery.start(serve_dashboard, source)
                assert isinstance(port, int) and port > 0
                await trio.to_thread.run_sync(check, f"http://127.0.0.1:{port}")
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_api_status_index_and_metrics_answer():
    def check(base: str) -> None:
        code, headers, body = http_get(base + "/api/status")
        assert code == 200 and headers["content-type"].startswith("application/json")
        status = json.loads(body)
        assert status["peer_id"] == STATUS["peer_id"]
        assert status["round"] == 7 and status["phase"] == "train"
        assert status["peer_count"] == 3 and status["peers"] == STATUS["peers"]
        assert status["history"] == STATUS["history"]

        code, headers, body = http_get(base + "/")
        page = body.decode()
        assert code == 200 and headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "api/status" in page and "<svg" in page
        # Self-contained: no external scripts, styles or fetches; peer data never goes in as HTML.
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
        assert "innerHTML" not in page

        code, headers, body = http_get(base + "/metrics")
        assert code == 200 and headers["content-type"].startswith("text/plain")
        samples = {
            sample.name: sample
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
        }
        assert samples["swarmp2p_round"].value == 7
        assert samples["swarmp2p_peers"].value == 3
        assert samples["swarmp2p_last_round_reward"].value == 0.5
        assert samples["swarmp2p_status_up"].value == 1
        assert samples["swarmp2p_batches_rejected_bad_signature_total"].value == 3
        assert samples["swarmp2p_messages_in_total"].value == 120
        assert samples["swarmp2p_node_info"].labels == {"peer_id": STATUS["peer_id"], "phase": "train"}

        assert http_get(base + "/nope")[0] == 404

    with_dashboard(lambda: STATUS, check)


EVAL_STATUS = {
    **STATUS,
    "eval": {
        "round": 6,
        "step": 7,
        "accuracy": 0.375,
        "reward": 0.5,
        "accuracy_change": 0.125,
        "questions": 16,
        "seconds": 2.5,
        "per_task": {
            "basic_arithmetic": {"accuracy": 0.5, "reward": 0.625, "n": 8},
            'odd"task<b>': {"accuracy": 0.25, "reward": 0.375, "n": 8},
        },
        "samples": [
            {
                "task": "basic_arithmetic",
                "index": 1,
                "completion": "<answer>4</answer>",
                "reference": "4",
                "correct": True,
                "reward": 1.0,
            }
        ],
    },
    "eval_history": [
        {"round": None, "step": 0, "accuracy": 0.25, "reward": 0.4},
        {"round": 6, "step": 7, "accuracy": 0.375, "reward": 0.5},
        "junk",
    ],
    "eval_deferred": None,
}


def test_held_out_evaluation_is_in_the_status_the_page_and_the_metrics():
    def check(base: str) -> None:
        status = json.loads(http_get(base + "/api/status")[2])
        assert status["eval"] == EVAL_STATUS["eval"]
        assert status["eval_history"] == EVAL_STATUS["eval_history"][:2]  # bad rows dropped
        assert status["eval_deferred"] is None

        page = http_get(base + "/")[2].decode()
        for element in ('id="evalchart"', 'id="eval_tasks"', 'id="eval_samples"', 'id="eval_accuracy"'):
            assert element in page
        assert "innerHTML" not in page

        families = {
            family.name: family
            for family in text_string_to_metric_families(http_get(base + "/metrics")[2].decode())
        }
        assert families["swarmp2p_eval_accuracy"].samples[0].value == 0.375
        assert families["swarmp2p_eval_reward"].samples[0].value == 0.5
        assert families["swarmp2p_eval_step"].samples[0].value == 7
        per_task = {s.labels["task"]: s.value for s in families["swarmp2p_eval_task_accuracy"].samples}
        assert per_task == {"basic_arithmetic": 0.5, 'odd"task<b>': 0.25}
        rewards = {s.labels["task"]: s.value for s in families["swarmp2p_eval_task_reward"].samples}
        assert rewards == {"basic_arithmetic": 0.625, 'odd"task<b>': 0.375}

    with_dashboard(lambda: EVAL_STATUS, check)

    def without_eval(base: str) -> None:
        status = json.loads(http_get(base + "/api/status")[2])
        assert status["eval"] is None and status["eval_history"] == []
        assert "swarmp2p_eval" not in http_get(base + "/metrics")[2].decode()

    with_dashboard(lambda: STATUS, without_eval)


def test_status_is_read_fresh_on_every_request_and_async_sources_work():
    state = {"round": 1}

    async def source():
        await trio.sleep(0)
        state["round"] += 1
        return {"round": state["round"], "peers": 4}

    def check(base: str) -> None:
        first = json.loads(http_get(base + "/api/status")[2])
        second = json.loads(http_get(base + "/api/status")[2])
        assert second["round"] == first["round"] + 1
        assert first["peer_count"] == 4 and first["peers"] == []

    with_dashboard(source, check)


def test_a_failing_source_gives_503_and_a_counter_not_a_crash():
    calls = {"n": 0}

    def source():
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("node is\nrestarting")
        return {"round": 3}

    def check(base: str) -> None:
        code, _headers, body = http_get(base + "/api/status")
        assert code == 503
        assert "node is restarting" in json.loads(body)["error"]
        metrics = http_get(base + "/metrics")[2].decode()
        assert "swarmp2p_status_up 0.0" in metrics
        assert "swarmp2p_dashboard_source_errors_total 2.0" in metrics
        # The server keeps serving once the source recovers.
        assert json.loads(http_get(base + "/api/status")[2])["round"] == 3

    with_dashboard(source, check)


def test_non_finite_and_odd_values_still_give_valid_json():
    source = {
        "round": 2,
        "history": [{"round": 1, "reward": float("nan")}, "junk", {"round": 2, "reward": float("inf")}],
        "counters": {"ok": 1, "text": "x", "flag": True},
        "path": __import__("pathlib").Path("/tmp/x"),
        "raw": b"\x01\x02",
    }

    def check(base: str) -> None:
        code, _headers, body = http_get(base + "/api/status")
        status = json.loads(body)
        assert code == 200
        assert status["history"] == [{"round": 1, "reward": None}, {"round": 2, "reward": None}]
        assert status["counters"] == {"ok": 1}
        assert status["path"] == "/tmp/x" and status["raw"] == "0102"
        assert http_get(base + "/metrics")[0] == 200

    with_dashboard(lambda: source, check)


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
json_like = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    raw=st.dictionaries(st.sampled_from(["peer_id", "round", "peers", "history", "counters", "x"]), json_like)
)
def test_normalize_status_always_yields_strict_json_in_the_schema(raw):
    status = normalize_status(raw)
    json.dumps(status, allow_nan=False)
    assert isinstance(status["peers"], list) and isinstance(status["peer_count"], int)
    assert all(isinstance(row, dict) for row in status["history"])
    assert all(isinstance(value, int | float) for value in status["counters"].values())


def test_file_status_source_reads_fresh_and_reports_problems(tmp_path):
    path = tmp_path / "status.json"
    source = FileStatusSource(path)
    with pytest.raises(StatusUnavailable, match="cannot read"):
        source()
    path.write_text(json.dumps({"round": 1}))
    assert source() == {"round": 1}
    path.write_text(json.dumps({"round": 2}))
    assert source() == {"round": 2}
    path.write_text("{not json")
    with pytest.raises(StatusUnavailable, match="not valid JSON"):
        source()
    path.write_text("[1, 2]")
    with pytest.raises(StatusUnavailable, match="not an object"):
        source()


def test_url_status_source_relays_another_dashboard():
    def check(base: str) -> None:
        relay = UrlStatusSource(base + "/api/status")
        assert trio.run(relay)["round"] == 7
        with pytest.raises(StatusUnavailable, match="HTTP 404"):
            trio.run(UrlStatusSource(base + "/missing"))

    with_dashboard(lambda: STATUS, check)


def test_dashboard_command_serves_a_status_file_until_interrupted(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(STATUS))
    executable = shutil.which("swarmp2p") or os.path.join(os.path.dirname(sys.executable), "swarmp2p")
    process = subprocess.Popen(
        [executable, "dashboard", "--from", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line
        code, _headers, body = http_get(f"http://127.0.0.1:{match.group(1)}/api/status")
        assert code == 200 and json.loads(body)["round"] == 7
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_dashboard_command_rejects_bad_config_with_exit_2(tmp_path):
    executable = shutil.which("swarmp2p") or os.path.join(os.path.dirname(sys.executable), "swarmp2p")
    env = {**os.environ, "SWARMP2P_PORT": "99999"}
    completed = subprocess.run(
        [executable, "dashboard", "--from", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0
    assert "[dashboard] port" in completed.stderr and "SWARMP2P_PORT" in completed.stderr


def test_healthz_answers_200_with_a_small_json_and_503_when_the_source_fails():
    def check(base: str) -> None:
        code, headers, body = http_get(base + "/healthz")
        assert code == 200 and headers["content-type"].startswith("application/json")
        health = json.loads(body)
        assert health == {
            "ok": True,
            "peer_id": STATUS["peer_id"],
            "round": 7,
            "peers": 3,
            "phase": STATUS["phase"],  # a status without a node phase: its round phase
        }
        assert len(body) < 300

    with_dashboard(lambda: STATUS, check)

    def broken() -> dict:
        raise RuntimeError("node is gone")

    def check_broken(base: str) -> None:
        code, _, body = http_get(base + "/healthz")
        health = json.loads(body)
        assert code == 503 and health["ok"] is False and "node is gone" in health["error"]

    with_dashboard(broken, check_broken)


def test_api_parameters_are_validated_with_a_4xx_and_a_clear_message():
    def check(base: str) -> None:
        code, _, body = http_get(base + "/api/status?history=1")
        assert code == 200 and json.loads(body)["history"] == STATUS["history"][-1:]
        code, _, body = http_get(base + "/api/status?history=0")
        assert code == 200 and json.loads(body)["history"] == []
        for query, words in [
            ("history=abc", ["history", "integer"]),
            ("history=-1", ["history", ">= 0"]),
            ("history=1&history=2", ["history", "once"]),
            ("round=3", ["unknown parameter", "round", "history"]),
        ]:
            code, headers, body = http_get(base + "/api/status?" + query)
            assert code == 400, query
            assert headers["content-type"].startswith("application/json")
            error = json.loads(body)["error"]
            assert all(word in error for word in words), (query, error)
        assert http_get(base + "/api/status", method="POST")[0] == 405

    with_dashboard(lambda: STATUS, check)
