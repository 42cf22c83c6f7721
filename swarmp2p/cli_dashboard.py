"""`swarmp2p dashboard`: serve the web dashboard for a saved status file or a running node.

`--from FILE` serves a status JSON file (a node's or simulator's saved status/report in the
dashboard's status schema, see `swarmp2p.dashboard`); the file is re-read on every request,
so a file that another process keeps rewriting shows live. `--status-url URL` instead relays
the `/api/status` of a node whose own dashboard listens elsewhere (e.g. on another machine,
reached through an SSH tunnel).
"""

from __future__ import annotations

import functools
import json
import signal
from pathlib import Path
from typing import Any

import attrs
import typer
from attrs import validators as v

from swarmp2p.config import register_config

_MAX_STATUS_BYTES = 64 * 1024 * 1024  # a status file is kilobytes; refuse to slurp a mistaken huge file


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
        None, "--from", help="Serve this status JSON file (re-read on every request)."
    ),
    status_url: str | None = typer.Option(
        None, "--status-url", help="Relay the /api/status of a running node's dashboard."
    ),
    host: str | None = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Port to bind; 0 picks a free one (default 8080)."),
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
        if not settings.status_file.is_file():
            errors.print(f"[red]error: status file {escape(str(settings.status_file))} does not exist[/red]")
            raise typer.Exit(code=2)
        source: Any = FileStatusSource(settings.status_file)
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
    """Status read from a JSON file on every call. Errors name the file, in one line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> dict[str, Any]:
        from swarmp2p.dashboard import StatusUnavailable

        try:
            with open(self.path, "rb") as handle:
                data = handle.read(_MAX_STATUS_BYTES + 1)
        except OSError as error:
            raise StatusUnavailable(f"cannot read {self.path}: {error.strerror}") from None
        if len(data) > _MAX_STATUS_BYTES:
            raise StatusUnavailable(f"{self.path} is larger than {_MAX_STATUS_BYTES} bytes")
        try:
            status = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise StatusUnavailable(f"{self.path} is not valid JSON: {error}") from None
        if not isinstance(status, dict):
            raise StatusUnavailable(f"{self.path} holds a JSON {type(status).__name__}, not an object")
        return status


class UrlStatusSource:
    """Status fetched from another dashboard's /api/status, in a worker thread (blocking I/O)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    async def __call__(self) -> dict[str, Any]:
        import trio

        return await trio.to_thread.run_sync(self._fetch)

    def _fetch(self) -> dict[str, Any]:
        import urllib.error
        import urllib.request

        from swarmp2p.dashboard import StatusUnavailable

        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                data = response.read(_MAX_STATUS_BYTES + 1)
        except urllib.error.HTTPError as error:
            raise StatusUnavailable(f"{self.url} answered HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise StatusUnavailable(f"cannot reach {self.url}: {reason}") from None
        try:
            status = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise StatusUnavailable(f"{self.url} did not answer JSON") from None
        if not isinstance(status, dict):
            raise StatusUnavailable(f"{self.url} answered a JSON {type(status).__name__}, not an object")
        return status
