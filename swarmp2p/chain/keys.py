"""Ethereum key files: one hex private key per file, readable by its owner only (0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from swarmp2p.chain.errors import ChainConfigError


def load_key_file(path: Path) -> Any:
    """Return the `eth_account` LocalAccount stored in `path`.

    Refuses a file that group or others can read or write: a leaked key lets anyone submit
    rewards and votes in this node's name."""
    from eth_account import Account

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ChainConfigError(f"key file not found: {path}") from None
    except OSError as error:
        raise ChainConfigError(f"cannot read key file {path}: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ChainConfigError(f"key file is not a regular file: {path}")
    if mode & 0o077:
        raise ChainConfigError(
            f"key file {path} has mode {mode & 0o777:o}; it must be 600 (chmod 600 {path})"
        )
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ChainConfigError(f"cannot read key file {path}: {error}") from None
    hex_key = text.removeprefix("0x").removeprefix("0X")
    if len(hex_key) != 64:
        raise ChainConfigError(f"key file {path} must hold one 32-byte hex private key")
    try:
        key = bytes.fromhex(hex_key)
        return Account.from_key(key)
    except ValueError:
        raise ChainConfigError(f"key file {path} does not hold a valid hex private key") from None


def write_key_file(path: Path, private_key: bytes) -> None:
    """Create `path` with mode 0600 holding `private_key` as hex; refuses to overwrite."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("0x" + private_key.hex() + "\n")
