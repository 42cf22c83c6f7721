"""`swarmp2p keygen`: create a node identity file and print its peer id."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command(name="keygen")(keygen)


def keygen(
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the private key (mode 0600)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing identity file."),
) -> None:
    """Create an ed25519 libp2p identity file and print its peer id on stdout."""
    from rich.console import Console
    from rich.markup import escape

    from swarmp2p.identity import IdentityError, create_identity

    errors = Console(stderr=True, soft_wrap=True)
    try:
        identity = create_identity(out, force=force)
    except IdentityError as error:
        errors.print(f"[red]error: {escape(str(error))}[/red]")
        raise typer.Exit(code=1) from None
    # The peer id alone on stdout so scripts can capture it; the human note goes to stderr.
    typer.echo(identity.peer_id)
    errors.print(f"wrote identity to {escape(str(out))} (mode 0600)")
