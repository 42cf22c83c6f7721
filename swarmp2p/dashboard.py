"""A small self-contained web dashboard for one node (or a saved report).

Four routes on a Starlette app, served by hypercorn under trio:

- `/`             an HTML page (inline CSS/JS/SVG, no CDN, works offline) polling `/api/status`;
- `/api/status`   the status as JSON (`?history=N`: only the last N rounds; a bad or unknown
                  parameter is a 400 with `{"error": "<one line>"}`);
- `/healthz`      `{"ok": true, "peer_id", "round", "peers"}` (503 and `"ok": false` when the
                  status source fails), for load balancers and scripts;
- `/metrics`      Prometheus text, computed from the same status at scrape time.

The dashboard owns no state: it asks a `StatusSource` (a callable returning a JSON-able
mapping, sync or async) on every request, so the node plugs in a snapshot of its own state
and the dashboard can never fall out of date or hold the node's locks. Status schema (every
key optional, extra keys are passed through to `/api/status`):

    {"peer_id": str, "round": int, "phase": str,
     "peers": [peer id, ...] or int,
     "history": [{"round": int, "reward": float, "rollouts_in": int,
                  "rollouts_out": int, "rejected": int}, ...],
     "counters": {name: number, ...},
     "eval": {"round": int or null, "step": int, "accuracy": float, "reward": float,
              "accuracy_change": float or null, "questions": int, "seconds": float,
              "per_task": {task: {"accuracy": float, "reward": float, "n": int}},
              "samples": [{"task", "completion", "reference", "correct", "reward"}, ...],
              "simulated": bool},
     "eval_history": [{"round": int or null, "step": int, "accuracy": float, "reward": float}, ...],
     "eval_deferred": {"round": int, "needed_s": float, "left_s": float} or null}

(`eval*` come from swarmp2p/heldout.py: the held-out evaluation; round null = before training.)

Peer ids, phases and counter names can come from other peers; the page inserts them only as
text (never as HTML) and a Content-Security-Policy forbids any script or fetch from elsewhere.
"""

from __future__ import annotations

import enum
import inspect
import json
import math
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

StatusSource = Callable[[], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]

_MAX_HISTORY = 10_000  # rounds kept in one response; a long-lived node must not grow the page forever
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
)


class StatusUnavailable(Exception):
    """The status source could not produce a status (a missing report file, a down node)."""


# --------------------------------------------------------------------------------------
# Status normalisation
# --------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of `value`: NaN/inf become None, Paths/enums/attrs become plain data."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if attrs.has(type(value)):
        return jsonable(attrs.asdict(value, recurse=False))
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def normalize_status(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The status in the schema above, with `peer_count` added and bad entries dropped."""
    if not isinstance(raw, Mapping):
        raise StatusUnavailable(f"status must be a JSON object, got {type(raw).__name__}")
    status = jsonable(raw)
    peers = status.get("peers")
    if isinstance(peers, int) and not isinstance(peers, bool):
        status["peer_count"], status["peers"] = peers, []
    elif isinstance(peers, list):
        status["peers"] = [str(peer) for peer in peers]
        status["peer_count"] = len(peers)
    else:
        status["peers"], status["peer_count"] = [], 0
    history = status.get("history")
    rows = [row for row in history if isinstance(row, dict)] if isinstance(history, list) else []
    status["history"] = rows[-_MAX_HISTORY:]
    counters = status.get("counters")
    status["counters"] = (
        {key: value for key, value in counters.items() if _is_number(value)}
        if isinstance(counters, dict)
        else {}
    )
    evals = status.get("eval_history")
    rows = [row for row in evals if isinstance(row, dict)] if isinstance(evals, list) else []
    status["eval_history"] = rows[-_MAX_HISTORY:]
    for key in ("eval", "eval_deferred"):
        if not isinstance(status.get(key), dict):
            status[key] = None
    for key in ("peer_id", "phase"):
        if key in status and status[key] is not None:
            status[key] = str(status[key])
    return status


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def read_status(source: StatusSource) -> dict[str, Any]:
    result = source()
    if inspect.isawaitable(result):
        result = await result
    return normalize_status(result)


# --------------------------------------------------------------------------------------
# Prometheus metrics
# --------------------------------------------------------------------------------------


def _metric_name(name: str) -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9_]", "_", name).strip("_").lower() or "unnamed"
    if cleaned[0].isdigit():
        cleaned = "_" + cleaned
    return f"swarmp2p_{cleaned}"


def render_metrics(status: Mapping[str, Any] | None, source_errors: int) -> tuple[bytes, str]:
    """Prometheus exposition text for one status snapshot (None: the source failed)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    families: list[Any] = []
    errors = CounterMetricFamily(
        "swarmp2p_dashboard_source_errors", "Times the status source failed to answer the dashboard."
    )
    errors.add_metric([], source_errors)
    families.append(errors)
    up = GaugeMetricFamily("swarmp2p_status_up", "1 if the status source answered this scrape, else 0.")
    up.add_metric([], 0 if status is None else 1)
    families.append(up)

    if status is not None:
        info = InfoMetricFamily("swarmp2p_node", "Identity and phase of the node.")
        info.add_metric(
            [], {"peer_id": str(status.get("peer_id") or ""), "phase": str(status.get("phase") or "")}
        )
        families.append(info)
        gauges = {
            "swarmp2p_round": ("Current round.", status.get("round")),
            "swarmp2p_peers": ("Connected peers.", status.get("peer_count")),
        }
        history = status.get("history") or []
        last = history[-1] if history else {}
        gauges["swarmp2p_last_round_reward"] = (
            "Mean reward of the latest finished round.",
            last.get("reward"),
        )
        for name, (help_text, value) in gauges.items():
            if _is_number(value):
                gauge = GaugeMetricFamily(name, help_text)
                gauge.add_metric([], float(value))
                families.append(gauge)
        families.extend(_eval_metrics(status))
        # The labeled families' names are taken first: a node counter that sanitises to one of
        # them is left out rather than clash with it.
        seen = {"swarmp2p_dashboard_source_errors", *_LABELED_NAMES}
        for key, value in sorted(status.get("counters", {}).items()):
            name = _metric_name(key)
            if name.endswith("_total"):
                name = name[: -len("_total")]
            if name in seen or value < 0:
                continue  # two keys that sanitise alike, or a value no counter can have
            seen.add(name)
            counter = CounterMetricFamily(name, f"Node counter '{key}'.")
            counter.add_metric([], float(value))
            families.append(counter)
        families.extend(_labeled_metrics(status))

    class _Snapshot:
        def collect(self) -> Any:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot())
    return generate_latest(registry), CONTENT_TYPE_LATEST


# Status sections whose numbers are counters (they only grow), exported as ONE labeled family
# each: (path in the status, metric name without `_total`, label name, help text). Everything
# `/api/status` counts is here, so a scrape sees every rejection, drop and hello the page shows.
_LABELED_COUNTERS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("rejections",), "swarmp2p_rejections", "reason", "Inbound messages the node rejected, by reason."),
    (
        ("network", "drops"),
        "swarmp2p_network_drops",
        "kind",
        "What the libp2p adapter dropped, refused or evicted, by kind.",
    ),
    (
        ("network", "gossip_rejections"),
        "swarmp2p_gossip_rejections",
        "reason",
        "Gossip messages our topic validators rejected (not delivered, not forwarded), by reason.",
    ),
    (("hellos",), "swarmp2p_hellos", "kind", "Hellos received, by outcome."),
)
# Status sections whose numbers are levels (they go up and down): one gauge family each.
_LABELED_GAUGES: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (
        ("network", "tables"),
        "swarmp2p_network_table_entries",
        "table",
        "Entries in the libp2p adapter's bounded tables (peer book, DHT store, ...).",
    ),
)
# Numbers shown in /api/status that are not counts of events (hellos' peers_with_other_rules is
# how many peers differ, now): exported as gauges under these names.
_GAUGE_KEYS = {("hellos", "peers_with_other_rules"): "swarmp2p_peers_with_other_rules"}
_NETWORK_GAUGES = {
    "connected_peers": "Peers with an open libp2p connection.",
    "known_peers": "Peers in the peer book.",
    "dht_routing_table": "Peers in the Kademlia routing table.",
}
_LABELED_NAMES = frozenset(
    [name for _, name, _, _ in _LABELED_COUNTERS + _LABELED_GAUGES]
    + list(_GAUGE_KEYS.values())
    + [f"swarmp2p_network_{key}" for key in _NETWORK_GAUGES]
)


def _section(status: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    node: Any = status
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _labeled_metrics(status: Mapping[str, Any]) -> list[Any]:
    """Counters and gauges of the status sections above, with a label per key."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: list[Any] = []
    for path, name, label, help_text in _LABELED_COUNTERS:
        counter = CounterMetricFamily(name, help_text, labels=[label])
        for key, value in sorted(_section(status, path).items()):
            if (*path, key) in _GAUGE_KEYS or not _is_number(value) or value < 0:
                continue
            counter.add_metric([str(key)], float(value))
        families.append(counter)  # present even when empty: a dashboard sees the family exists
    for path, name, label, help_text in _LABELED_GAUGES:
        gauge = GaugeMetricFamily(name, help_text, labels=[label])
        for key, value in sorted(_section(status, path).items()):
            if _is_number(value):
                gauge.add_metric([str(key)], float(value))
        if gauge.samples:
            families.append(gauge)
    for (*path, key), name in _GAUGE_KEYS.items():
        value = _section(status, tuple(path)).get(key)
        if _is_number(value):
            gauge = GaugeMetricFamily(name, f"Status value {'.'.join((*path, key))}.")
            gauge.add_metric([], float(value))
            families.append(gauge)
    network = _section(status, ("network",))
    for key, help_text in _NETWORK_GAUGES.items():
        if _is_number(network.get(key)):
            gauge = GaugeMetricFamily(f"swarmp2p_network_{key}", help_text)
            gauge.add_metric([], float(network[key]))
            families.append(gauge)
    # Any other section of numbers (e.g. a chain coordinator's "chain"): one gauge family per
    # section, a label per (dotted) key, so nothing /api/status counts is missing here.
    for section, value in sorted(status.items()):
        if section in _SECTIONS_EXPORTED or not isinstance(value, Mapping):
            continue
        leaves = sorted(_numeric_leaves(value))
        if leaves:
            gauge = GaugeMetricFamily(
                f"{_metric_name('status_' + section)}",
                f"Numbers of the status section '{section}'.",
                labels=["key"],
            )
            for key, number in leaves:
                gauge.add_metric([key], number)
            families.append(gauge)
    return families


# Top-level status keys exported above (or on purpose not: the schedule is configuration).
_SECTIONS_EXPORTED = frozenset(
    {
        "counters",
        "rejections",
        "network",
        "hellos",
        "eval",
        "eval_history",
        "eval_deferred",
        "history",
        "schedule",
    }
)


def _numeric_leaves(node: Mapping[str, Any], prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    leaves: list[tuple[str, float]] = []
    for key, value in node.items():
        name = f"{prefix}{key}"
        if _is_number(value):
            leaves.append((name, float(value)))
        elif isinstance(value, Mapping) and depth < 2:
            leaves.extend(_numeric_leaves(value, name + ".", depth + 1))
    return leaves


def _eval_metrics(status: Mapping[str, Any]) -> list[Any]:
    """Gauges of the latest held-out evaluation: overall and per task (label `task`)."""
    from prometheus_client.core import GaugeMetricFamily

    result = status.get("eval")
    if not isinstance(result, Mapping):
        return []
    families: list[Any] = []
    overall = {
        "swarmp2p_eval_accuracy": (
            "Held-out accuracy of the latest evaluation (the mean over its tasks).",
            "accuracy",
        ),
        "swarmp2p_eval_reward": ("Held-out mean reward of the latest evaluation.", "reward"),
        "swarmp2p_eval_step": ("Training step the latest held-out evaluation measured.", "step"),
        "swarmp2p_eval_seconds": ("Duration of the latest held-out evaluation.", "seconds"),
    }
    for name, (help_text, key) in overall.items():
        if _is_number(result.get(key)):
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], float(result[key]))
            families.append(gauge)
    per_task = result.get("per_task")
    if isinstance(per_task, Mapping):
        for key in ("accuracy", "reward"):
            gauge = GaugeMetricFamily(
                f"swarmp2p_eval_task_{key}",
                f"Held-out {key} of the latest evaluation, per task.",
                labels=["task"],
            )
            for task, stats in sorted(per_task.items()):
                if isinstance(stats, Mapping) and _is_number(stats.get(key)):
                    gauge.add_metric([str(task)], float(stats[key]))
            if gauge.samples:
                families.append(gauge)
    return families


# --------------------------------------------------------------------------------------
# The ASGI app and the server
# --------------------------------------------------------------------------------------


def build_app(source: StatusSource, *, title: str = "swarmp2p") -> Any:
    """The Starlette app; mount it elsewhere or serve it with `serve_dashboard`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    state = {"source_errors": 0}
    page = _PAGE.replace("__TITLE__", _html_escape(title))

    async def snapshot() -> tuple[dict[str, Any] | None, str]:
        try:
            return await read_status(source), ""
        except Exception as error:  # a broken source must not take the dashboard down
            state["source_errors"] += 1
            return None, " ".join(f"{type(error).__name__}: {error}".split())[:300]

    async def index(_: Request) -> Response:
        return HTMLResponse(page, headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-store"})

    def json_response(body: Any, code: int = 200) -> Response:
        return Response(
            json.dumps(body, allow_nan=False),
            status_code=code,
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def api_status(request: Request) -> Response:
        try:
            params = _query_params(request.query_params.multi_items(), _STATUS_PARAMS)
        except ValueError as error:
            return json_response({"error": str(error)}, 400)
        status, problem = await snapshot()
        if status is None:
            return json_response({"error": f"status unavailable: {problem}"}, 503)
        if "history" in params:
            keep = params["history"]
            status["history"] = status["history"][-keep:] if keep else []
        return json_response(status)

    async def healthz(_: Request) -> Response:
        status, problem = await snapshot()
        if status is None:
            return json_response({"ok": False, "error": f"status unavailable: {problem}"}, 503)
        return json_response(
            {
                "ok": True,
                "peer_id": status.get("peer_id"),
                "round": status.get("round"),
                "peers": status.get("peer_count"),
            }
        )

    async def metrics(_: Request) -> Response:
        status, _problem = await snapshot()
        payload, content_type = render_metrics(status, state["source_errors"])
        return Response(payload, headers={"Content-Type": content_type})

    return Starlette(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/api/status", api_status, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


async def serve_dashboard(
    source: StatusSource,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    title: str = "swarmp2p",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the dashboard until cancelled. Reports the bound port through `task_status`
    (so `port=0` picks a free one): `port = await nursery.start(serve_dashboard, source)`."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # hypercorn's "Running on" chatter would drown the node's own log
    config.graceful_timeout = 1.0  # a cancelled node should stop in about a second, not hang
    config.include_server_header = False

    async def serve_and_report(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        await serve(build_app(source, title=title), config, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve_and_report)
        task_status.started(int(binds[0].rsplit(":", 1)[1]))


_STATUS_PARAMS = {"history": (0, _MAX_HISTORY)}
"""Query parameters of /api/status: name -> (min, max) of its integer value."""


def _query_params(items: list[tuple[str, str]], allowed: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Validated integer query parameters; ValueError with a one-line message for the 400."""
    seen: dict[str, int] = {}
    for name, raw in items:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"unknown parameter {name!r} (known: {known})")
        if name in seen:
            raise ValueError(f"parameter {name!r} given more than once")
        low, high = allowed[name]
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"parameter {name!r} must be an integer, got {raw[:40]!r}") from None
        if not low <= value <= high:
            raise ValueError(f"parameter {name!r} must be >= {low} and <= {high}, got {value}")
        seen[name] = value
    return seen


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


# The page: plain DOM + inline SVG. Every value from the status goes in through textContent or
# setAttribute on a number, never innerHTML, because peer ids and counters come from the network.
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__ dashboard</title>
<style>
 body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5rem;color:#1d2330;background:#f6f7f9}
 h1{font-size:1.3rem;margin:0 0 1rem} h2{font-size:1rem;margin:1.2rem 0 .4rem}
 .cards{display:flex;flex-wrap:wrap;gap:.8rem}
 .card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.6rem .9rem;min-width:9rem}
 .card .k{font-size:.75rem;color:#5b6473;text-transform:uppercase;letter-spacing:.04em}
 .card .v{font-size:1.15rem;font-weight:600;word-break:break-all}
 table{border-collapse:collapse;background:#fff;font-size:.85rem}
 td,th{border:1px solid #dde1e7;padding:.25rem .6rem;text-align:right} th{background:#eef0f4}
 td.l,th.l{text-align:left}
 svg.chart{background:#fff;border:1px solid #dde1e7;border-radius:6px;max-width:100%;height:auto}
 .note{font-size:.8rem;font-weight:normal;color:#5b6473}
 .samples{table-layout:fixed;width:100%;max-width:72rem}
 .samples td{vertical-align:top}
 .samples td.text{font-family:ui-monospace,monospace;font-size:.78rem;white-space:pre-wrap;
  word-break:break-word;text-align:left}
 .ok{color:#067647;font-weight:600} .bad{color:#b42318;font-weight:600}
 #state{font-size:.8rem;color:#5b6473} #state.bad{color:#b42318;font-weight:600}
 .peers{font-family:ui-monospace,monospace;font-size:.8rem;max-height:10rem;overflow:auto;background:#fff;
  border:1px solid #dde1e7;padding:.4rem;margin:0}
</style></head>
<body>
<h1>__TITLE__ <span id="state">connecting…</span></h1>
<div class="cards">
 <div class="card"><div class="k">peer id</div><div class="v" id="peer_id">–</div></div>
 <div class="card"><div class="k">round</div><div class="v" id="round">–</div></div>
 <div class="card"><div class="k">phase</div><div class="v" id="phase">–</div></div>
 <div class="card"><div class="k">peers</div><div class="v" id="peer_count">–</div></div>
 <div class="card"><div class="k">last reward</div><div class="v" id="last_reward">–</div></div>
</div>
<h2>Reward per round</h2>
<svg id="chart" class="chart" width="720" height="240" viewBox="0 0 720 240" role="img"
 aria-label="reward per round"></svg>
<h2>Held-out evaluation <span class="note" id="eval_note"></span></h2>
<div class="cards">
 <div class="card"><div class="k">accuracy</div><div class="v" id="eval_accuracy">–</div></div>
 <div class="card"><div class="k">change</div><div class="v" id="eval_change">–</div></div>
 <div class="card"><div class="k">eval reward</div><div class="v" id="eval_reward">–</div></div>
 <div class="card"><div class="k">measured at</div><div class="v" id="eval_when">–</div></div>
 <div class="card"><div class="k">deferred</div><div class="v" id="eval_deferred">–</div></div>
</div>
<p></p>
<svg id="evalchart" class="chart" width="720" height="200" viewBox="0 0 720 200" role="img"
 aria-label="held-out accuracy per round"></svg>
<h2>Held-out accuracy per task</h2>
<table><thead><tr><th class="l">task</th><th>accuracy</th><th>reward</th><th>questions</th></tr>
</thead><tbody id="eval_tasks"></tbody></table>
<h2>Last logged generations</h2>
<table class="samples"><colgroup><col style="width:11rem"><col style="width:5rem"><col style="width:5rem">
<col style="width:8rem"><col></colgroup>
<thead><tr><th class="l">task</th><th>correct</th><th>reward</th><th class="l">reference</th>
<th class="l">completion</th></tr></thead><tbody id="eval_samples"></tbody></table>
<h2>Recent rounds</h2>
<table><thead><tr><th>round</th><th>reward</th><th>rollouts in</th><th>rollouts out</th><th>rejected</th>
<th>held-out acc</th></tr>
</thead><tbody id="rounds"></tbody></table>
<h2>Counters</h2>
<table><tbody id="counters"></tbody></table>
<h2>Connected peers</h2>
<pre class="peers" id="peers"></pre>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const fmt = (x, digits) => (typeof x === "number" && isFinite(x)) ? x.toFixed(digits) : "–";
function text(id, value) {
  $(id).textContent = (value === null || value === undefined) ? "–" : String(value);
}
function svg(tag, attrs, content) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (content !== undefined) node.textContent = content;
  return node;
}
function drawChart(chart, series, opts) {
  // series: [{pts: [{x, y, tip}], color, dash}]; opts: {W, H, y0, y1, empty, xlabel}
  chart.replaceChildren();
  const W = opts.W, H = opts.H, L = 48, R = 12, T = 12, B = 28;
  const all = series.flatMap(s => s.pts);
  if (all.length === 0) { chart.appendChild(svg("text", {x: W/2, y: H/2, "text-anchor": "middle",
    fill: "#5b6473"}, opts.empty)); return; }
  const xs = all.map(p => p.x), ys = all.map(p => p.y);
  let x0 = Math.min(...xs), x1 = Math.max(...xs); if (x0 === x1) { x0 -= 1; x1 += 1; }
  const y0 = Math.min(opts.y0, ...ys), y1 = Math.max(opts.y1, ...ys);
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    chart.appendChild(svg("line", {x1: L, x2: W - R, y1: sy(y), y2: sy(y), stroke: "#eef0f4"}));
    chart.appendChild(svg("text", {x: L - 6, y: sy(y) + 4, "text-anchor": "end", "font-size": 11,
      fill: "#5b6473"}, y.toFixed(2)));
  }
  const xname = opts.xname || ((x) => "round " + x);
  chart.appendChild(svg("text", {x: L, y: H - 8, "font-size": 11, fill: "#5b6473"}, xname(x0)));
  chart.appendChild(svg("text", {x: W - R, y: H - 8, "text-anchor": "end", "font-size": 11,
    fill: "#5b6473"}, xname(x1)));
  let legendX = L + 8;
  for (const s of series) {
    if (s.pts.length === 0) continue;
    const d = s.pts.map((p, i) => (i ? "L" : "M") + sx(p.x).toFixed(1) + "," + sy(p.y).toFixed(1)).join("");
    const line = {d: d, fill: "none", stroke: s.color, "stroke-width": 2};
    if (s.dash) line["stroke-dasharray"] = "5 4";
    chart.appendChild(svg("path", line));
    if (s.pts.length <= 200) for (const p of s.pts) {
      const dot = svg("circle", {cx: sx(p.x), cy: sy(p.y), r: 3, fill: s.color});
      dot.appendChild(svg("title", {}, p.tip));
      chart.appendChild(dot);
    }
    if (s.label) {
      chart.appendChild(svg("rect", {x: legendX, y: T + 2, width: 12, height: 3, fill: s.color}));
      chart.appendChild(svg("text", {x: legendX + 16, y: T + 8, "font-size": 11, fill: "#1d2330"}, s.label));
      legendX += 24 + 7 * s.label.length;
    }
  }
}
function drawRewards(history) {
  const pts = history.filter(r => typeof r.round === "number" && typeof r.reward === "number")
    .map(r => ({x: r.round, y: r.reward, tip: "round " + r.round + ": " + fmt(r.reward, 3)}));
  drawChart($("chart"), [{pts: pts, color: "#2563eb"}],
    {W: 720, H: 240, y0: 0, y1: 1, empty: "no rounds yet"});
}
function evalStart(evals, history) {
  // An evaluation before training has round null: drawn one round before the first one played.
  const played = history.concat(evals).map(r => r.round).filter(r => typeof r === "number");
  return played.length ? Math.min(...played) - 1 : 0;
}
function drawEval(evals, history) {
  const start = evalStart(evals, history);
  const rows = evals.filter(e => typeof e.accuracy === "number")
    .map(e => ({e: e, x: typeof e.round === "number" ? e.round : start}));
  const before = rows.some(r => typeof r.e.round !== "number");
  const first = (e) => e.step ? "at start" : "before training";  // a resumed node's first is not "before"
  const when = (r) => (typeof r.e.round === "number" ? "round " + r.e.round : first(r.e)) +
    (typeof r.e.step === "number" ? " (step " + r.e.step + ")" : "");
  const acc = rows.map(r => ({x: r.x, y: r.e.accuracy, tip: when(r) + ": accuracy " + fmt(r.e.accuracy, 3)}));
  const rew = rows.filter(r => typeof r.e.reward === "number")
    .map(r => ({x: r.x, y: r.e.reward, tip: when(r) + ": reward " + fmt(r.e.reward, 3)}));
  drawChart($("evalchart"), [{pts: acc, color: "#067647", label: "accuracy"},
                             {pts: rew, color: "#9e77ed", dash: true, label: "reward"}],
    {W: 720, H: 200, y0: 0, y1: 1, empty: "no held-out evaluation yet",
     xname: (x) => (before && x === start) ? first(rows.find(r => typeof r.e.round !== "number").e) :
       "round " + x});
}
function cell(tr, value, cls) {
  const td = document.createElement("td"); td.textContent = value; if (cls) td.className = cls;
  tr.appendChild(td); return td;
}
function fillEval(body) {
  const last = body.eval || null, deferred = body.eval_deferred || null;
  const counters = body.counters || {};
  text("eval_accuracy", last ? fmt(last.accuracy, 3) : null);
  const change = last ? last.accuracy_change : null;
  text("eval_change", typeof change === "number" ? (change >= 0 ? "+" : "") + change.toFixed(3) : null);
  text("eval_reward", last ? fmt(last.reward, 3) : null);
  text("eval_when", !last ? null : (typeof last.round === "number" ? "round " + last.round : "at start") +
    (typeof last.step === "number" ? " · step " + last.step : ""));
  text("eval_deferred", typeof counters.eval_deferred === "number" ? counters.eval_deferred : 0);
  let note = last && last.simulated ? "simulated learner: accuracy is its simulated skill" : "";
  if (last && typeof last.questions === "number") note = (note ? note + " · " : "") + last.questions +
    " held-out questions" + (typeof last.seconds === "number" ? " in " + last.seconds.toFixed(1) + " s" : "");
  if (deferred) note += " · last deferred in round " + deferred.round + ": " + fmt(deferred.needed_s, 1) +
    " s needed, " + fmt(deferred.left_s, 1) + " s left" +
    (typeof deferred.stopped_after_s === "number" ?
      ", stopped after " + fmt(deferred.stopped_after_s, 1) + " s" : "");
  $("eval_note").textContent = note;
  drawEval(Array.isArray(body.eval_history) ? body.eval_history : [], body.history || []);
  const tasks = $("eval_tasks"); tasks.replaceChildren();
  const perTask = (last && last.per_task) || {};
  for (const name of Object.keys(perTask).sort()) {
    const t = perTask[name] || {}, tr = document.createElement("tr");
    cell(tr, name, "l"); cell(tr, fmt(t.accuracy, 3)); cell(tr, fmt(t.reward, 3));
    cell(tr, typeof t.n === "number" ? String(t.n) : "–"); tasks.appendChild(tr);
  }
  const samples = $("eval_samples"); samples.replaceChildren();
  for (const sample of (last && Array.isArray(last.samples)) ? last.samples : []) {
    const tr = document.createElement("tr");
    cell(tr, String(sample.task), "l");
    cell(tr, sample.correct ? "yes" : "no", sample.correct ? "ok" : "bad");
    cell(tr, fmt(sample.reward, 2));
    cell(tr, String(sample.reference), "text");
    const full = String(sample.completion), long = full.length > 800;
    const shown = cell(tr, long ? full.slice(0, 800) + "…" : full, "text");
    if (long) shown.title = full;
    samples.appendChild(tr);
  }
}
function fillRounds(history) {
  const body = $("rounds"); body.replaceChildren();
  // A node's records carry rejections per reason, a report's a total: show the total either way.
  const total = (v) => (v && typeof v === "object") ? Object.values(v).reduce((a, b) => a + b, 0) : v;
  for (const row of history.slice(-20).reverse()) {
    const tr = document.createElement("tr");
    const ev = (row.eval && typeof row.eval === "object") ? row.eval : null;
    for (const [value, digits] of [[row.round, 0], [row.reward, 3], [row.rollouts_in, 0],
                                   [row.rollouts_out, 0], [total(row.rejected), 0]]) {
      cell(tr, (typeof value === "number") ? fmt(value, digits) : "–");
    }
    cell(tr, ev ? fmt(ev.accuracy, 3) : (row.eval_deferred ? "deferred" : ""));
    body.appendChild(tr);
  }
}
function fillCounters(counters) {
  const body = $("counters"); body.replaceChildren();
  for (const key of Object.keys(counters).sort()) {
    const tr = document.createElement("tr");
    const k = document.createElement("td"); k.className = "l"; k.textContent = key;
    const v = document.createElement("td"); v.textContent = String(counters[key]);
    tr.append(k, v); body.appendChild(tr);
  }
}
async function refresh() {
  try {
    const response = await fetch("api/status", {cache: "no-store"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
    const history = body.history || [];
    text("peer_id", body.peer_id); text("round", body.round); text("phase", body.phase);
    text("peer_count", body.peer_count);
    text("last_reward", history.length ? fmt(history[history.length - 1].reward, 3) : null);
    drawRewards(history); fillRounds(history); fillCounters(body.counters || {}); fillEval(body);
    $("peers").textContent = (body.peers || []).join("\\n");
    $("state").textContent = "updated " + new Date().toLocaleTimeString(); $("state").className = "";
  } catch (error) {
    $("state").textContent = "no status: " + error.message; $("state").className = "bad";
  }
}
refresh(); setInterval(refresh, 2000);
</script>
</body></html>
"""
