"""A small self-contained web dashboard for one node, its data dir, a simulation report or an
experiment. The parts, each small:

- `status`:  the status schema; `normalize_status` makes any source's mapping JSON-safe and in it;
- `view`:    what the page draws, a pure function of a status (charts' series, tables' rows);
- `names`:   human-friendly peer names (adjective-adjective-animal) from peer ids;
- `sources`: a simulation report, an experiment or a data dir, read into the schema;
- `metrics`: `/metrics` for Prometheus from the same status;
- `app`:     the Starlette app, `serve_dashboard` (hypercorn under trio), `write_html_report`;
- `page.html`, `page.js`: the page (inline CSS/JS/SVG, no CDN, works offline).

The dashboard owns no state: it asks a `StatusSource` (a callable returning a JSON-able mapping,
sync or async) on every request, so the node plugs in a snapshot of its own state and the
dashboard can never fall out of date or hold the node's locks.

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
