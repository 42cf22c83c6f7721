"""A small self-contained web dashboard for one node, its data dir, a simulation report or an
experiment. The parts, each small:

- `status`:  the status schema; `normalize_status` makes any source's mapping JSON-safe and in it;
- `view`:    what the page draws, a pure function of a status (charts' series, tables' rows);
- `names`:   human-friendly peer names (adjective-adjective-animal) from peer ids;
- `sources`: a simulation report, an experiment or a data dir, read into the schema;
- `metrics`: `/metrics` for Prometheus from the same status;
- `app`:     the Starlette app, `serve_dashboard` (hypercorn under trio), `write_html_report`;
- `snapshot`: a node's status built on its trio thread into immutable snapshots (with their age);
- `thread_server`: `serve_dashboard_in_thread`, the app on a thread of its own, answering from
  those snapshots however busy the node's loop is;
- `page.html`, `page.js`: the page (inline CSS/JS/SVG, no CDN, works offline).

The dashboard owns no state: it asks a `StatusSource` (a callable returning a JSON-able mapping,
sync or async) on every request. A node plugs in its published snapshots (`snapshot`), so a
request never runs on, or waits for, the node's own thread.

Peer ids, phases, tasks, completions and counter names can come from other peers; the page
inserts them only as text (never as HTML) and a Content-Security-Policy forbids any script or
fetch from elsewhere.
"""

from swarmp2p.dashboard.app import build_app, page_html, serve_dashboard, write_html_report
from swarmp2p.dashboard.metrics import render_metrics
from swarmp2p.dashboard.names import peer_name
from swarmp2p.dashboard.status import (
    StatusSource,
    StatusUnavailable,
    jsonable,
    normalize_status,
    read_status,
)
from swarmp2p.dashboard.view import build_view

__all__ = [
    "StatusSource",
    "StatusUnavailable",
    "build_app",
    "build_view",
    "jsonable",
    "normalize_status",
    "page_html",
    "peer_name",
    "read_status",
    "render_metrics",
    "serve_dashboard",
    "write_html_report",
]
