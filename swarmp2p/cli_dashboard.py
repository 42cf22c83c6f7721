"""`swarmp2p dashboard`: serve the web dashboard for a saved status file or a running node.

`--from PATH` serves what PATH holds, re-read on every request: a node's data dir (its whole
rounds.jsonl, plus the running node's live status when node.json names its dashboard), a
simulation report (`simulate --out DIR` writes DIR/report.json; the DIR works too), an
experiment's output dir (table.json, jobs.json) or a status JSON file in the dashboard's schema
(see `swarmp2p.dashboard`). `--html FILE` writes the same page with the data inlined, as a
static report, and exits. `--status-url URL` instead relays
the `/api/status` of a node whose own dashboard listens elsewhere (e.g. on another machine,
reached through an SSH tunnel).
"""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import Any

import attrs
import typer
from attrs import validators as v

from swarmp2p.config import register_config


@register_config("dashboard")
@attrs.frozen
class DashboardConfig:
    """Settings of `swarmp2p dashboard` (section [dashboard], variables SWARMP2P_<FIELD>)."""

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8080, validator=[v.ge(0), v.le(65535)])
    status_file: Path | None = None
    status_url: str | None = attrs.field(
        default=None,
        validator=v.optional(v.matches_re(r"^https?://\S+$")),
    )
    title: str = "swarmp2p"


def register(app: typer.Typer) -> None:
    app.command(name="dashboard")(dashboard)


def dashboard(
    from_file: Path | None = typer.Option(
        None,
        "--from",
        help="A node's data dir, a simulation report (or its dir), an experiment dir or a status JSON file.",
    ),
    status_url: str | None = typer.Option(
        None, "--status-url", help="Relay the /api/status of a running node's dashboard."
    ),
    host: str | None = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Port to bind; 0 picks a free one (default 8080)."),
    html: Path | None = typer.Option(
        None, "--html", help="Write a static HTML report of --from to this file and exit."
    ),
    config: Path | None = typer.Option(None, "--config", help="TOML config file (\\[dashboard] section)."),
    print_config: bool = typer.Option(False, "--print-config", help="Print the effective config and exit."),
) -> None:
    """Serve the swarm dashboard (/, /api/status, /healthz, /metrics) for a status file or a node."""
    from rich.console import Console
    from rich.markup import escape

    from swarmp2p.config import config_or_exit, dump_config

    settings = config_or_exit(
        DashboardConfig,
        section="dashboard",
        file=config,
        overrides={"host": host, "port": port, "status_file": from_file, "status_url": status_url},
    )
    if print_config:
        typer.echo(dump_config(settings), nl=False)
        return
    errors = Console(stderr=True, soft_wrap=True)
    if (settings.status_file is None) == (settings.status_url is None):
        errors.print(
            "[red]config error: \\[dashboard] give exactly one of --from FILE or --status-url URL[/red]"
        )
        raise typer.Exit(code=2)

    import trio

    from swarmp2p.dashboard import serve_dashboard

    if settings.status_file is not None:
        if not settings.status_file.exists():
            errors.print(f"[red]error: {escape(str(settings.status_file))} does not exist[/red]")
            raise typer.Exit(code=2)
        source: Any = FileStatusSource(settings.status_file)
        if html is not None:
            from swarmp2p.dashboard import StatusUnavailable, write_html_report

            try:
                write_html_report(source(), html, title=settings.title)
            except (StatusUnavailable, OSError) as error:
                errors.print(f"[red]error: {escape(str(error))}[/red]")
                raise typer.Exit(code=1) from None
            errors.print(f"wrote {escape(str(html))}")
            return
    else:
        source = UrlStatusSource(settings.status_url or "")

    async def run() -> str | None:
        """Serve until SIGINT/SIGTERM; returns a bind error message instead of raising."""
        problem: str | None = None
        try:
            async with trio.open_nursery() as nursery:
                serve = functools.partial(
                    serve_dashboard, source, host=settings.host, port=settings.port, title=settings.title
                )
                bound = await nursery.start(serve)
                shown_host = f"[{settings.host}]" if ":" in settings.host else settings.host
                errors.print(f"dashboard on http://{shown_host}:{bound}/ (Ctrl-C to stop)")
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        break
        except* OSError as group:  # the port is taken, the address is not ours, ...
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):  # nested nurseries nest the groups
                first = first.exceptions[0]
            problem = str(getattr(first, "strerror", None) or first)
        return problem

    problem = trio.run(run)
    if problem is not None:
        errors.print(
            f"[red]error: cannot serve on {escape(settings.host)}:{settings.port}: {escape(problem)}[/red]"
        )
        raise typer.Exit(code=1)


class FileStatusSource:
    """Status read on every call from a path: a status or simulation report JSON file, an
    experiment's output dir or a node's data dir (swarmp2p/dashboard/sources.py). Errors name
    the file, in one line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> dict[str, Any]:
        from swarmp2p.dashboard.sources import status_of_path

        return status_of_path(self.path)


class UrlStatusSource:
    """Status fetched from another dashboard's /api/status, in a worker thread (blocking I/O)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    async def __call__(self) -> dict[str, Any]:
        import trio

        from swarmp2p.dashboard.sources import fetch_json

        return await trio.to_thread.run_sync(fetch_json, self.url, self.timeout_s)
