"""The dashboard's web app: four routes on a Starlette app, served by hypercorn under trio.

- `/`             the page (swarmp2p/dashboard/page.html + page.js, inline: no CDN, works offline)
                  polling `/api/status`;
- `/api/status`   the status as JSON plus `view`, what the page draws (`?history=N`: only the last
                  N rounds; a bad or unknown parameter is a 400 with `{"error": "<one line>"}`);
- `/healthz`      `{"ok": true, "peer_id", "round", "peers", "phase"}` (503 and `"ok": false` when
                  the status source fails), for load balancers and scripts; a node's `phase` is
                  where it is: starting, loading, evaluating, joining, playing (`node_phase` in
                  its status; a status without one gives its round phase);
- `/metrics`      Prometheus text, computed from the same status at scrape time.

`write_html_report` writes the same page with one status inlined: a file to open or mail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import trio

from swarmp2p.dashboard.metrics import render_metrics
from swarmp2p.dashboard.sources import merge_history
from swarmp2p.dashboard.status import MAX_HISTORY, StatusSource, normalize_status, read_status
from swarmp2p.dashboard.view import build_view

_MAX_HISTORY = MAX_HISTORY
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
)


def page_html(title: str = "swarmp2p", status: Mapping[str, Any] | None = None) -> str:
    """The page; with `status`, a static report of it (the status and its view inlined)."""
    folder = resources.files("swarmp2p.dashboard")
    page = folder.joinpath("page.html").read_text(encoding="utf-8")
    script = folder.joinpath("page.js").read_text(encoding="utf-8")
    data = "null"
    if status is not None:
        body = normalize_status(status)
        body["view"] = build_view(body)
        # In a <script> element only "</" could end it early; \u003c keeps the JSON the same.
        data = json.dumps(body, allow_nan=False).replace("<", "\\u003c")
    return (
        page.replace("__TITLE__", _html_escape(title)).replace("__DATA__", data).replace("__SCRIPT__", script)
    )


def write_html_report(status: Mapping[str, Any], path: Path, *, title: str = "swarmp2p") -> Path:
    """Write the dashboard page for one status as a self-contained HTML file."""
    path.write_text(page_html(title, status), encoding="utf-8")
    return path


class HistoryFile:
    """A node's rounds.jsonl, read incrementally: a file that grew is read from where the last
    read stopped (a long-lived node's log is megabytes, re-read every round otherwise); one that
    shrank or was replaced is read again from the start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._rows: list[dict[str, Any]] = []

    def rows(self) -> list[dict[str, Any]]:
        try:
            stat = self.path.stat()
        except OSError:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._offset, self._rows = stat.st_ino, 0, []
        if stat.st_size > self._offset:
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(self._offset)
                    data = handle.read(stat.st_size - self._offset)
            except OSError:
                return self._rows
            complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for its newline
            self._offset += len(complete)
            for line in complete.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    self._rows.append(row)
            if len(self._rows) > 2 * MAX_HISTORY:
                del self._rows[:-MAX_HISTORY]
        return self._rows[-MAX_HISTORY:]


def build_app(source: StatusSource, *, title: str = "swarmp2p", history_file: Path | None = None) -> Any:
    """The Starlette app; mount it elsewhere or serve it with `serve_dashboard`. With
    `history_file` (a node's rounds.jsonl) the history holds every logged round, not only those
    the source keeps in memory (a node's since it last started)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    state = {"source_errors": 0}
    page = page_html(title)

    logged = HistoryFile(history_file) if history_file is not None else None

    async def snapshot() -> tuple[dict[str, Any] | None, str]:
        try:
            status = await read_status(source)
            if logged is not None:
                rows = await trio.to_thread.run_sync(logged.rows)
                status["history"] = merge_history(rows, status["history"])
            return status, ""
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
        status["view"] = build_view(status)
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
                "phase": status.get("node_phase") or status.get("phase"),
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
    history_file: Path | None = None,
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
        await serve(
            build_app(source, title=title, history_file=history_file), config, task_status=task_status
        )

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
