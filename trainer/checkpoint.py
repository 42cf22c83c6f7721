"""Atomic checkpoints: write a temp file, fsync, rename, keep the newest K.

A checkpoint file is `MAGIC + sha256(payload) + payload`, where payload is a `torch.save`d dict
loaded back with `weights_only=True` (no arbitrary unpickling). The digest catches a file that
was truncated or flipped on disk; such a file is reported and the previous checkpoint used.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAGIC = b"SWARMP2P-CKPT-1\n"
_NAME = re.compile(r"^step-(\d{9})\.ckpt$")


class CorruptCheckpoint(Exception):
    """A checkpoint file failed its magic, digest or decode check."""


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:09d}.ckpt"


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in `folder`, oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some platforms cannot open directories; the rename is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(folder: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    final = checkpoint_path(folder, step)
    fd, temp_name = tempfile.mkstemp(prefix=".tmp-", suffix=".ckpt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(MAGIC)
            handle.write(hashlib.sha256(payload).digest())
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, 0o600)
        os.replace(temp_name, final)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(folder)
    for _step, old in list_checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def read_checkpoint(path: Path) -> dict[str, Any]:
    import torch

    blob = path.read_bytes()
    header = len(MAGIC) + 32
    if len(blob) < header or not blob.startswith(MAGIC):
        raise CorruptCheckpoint(f"{path.name}: not a swarmp2p checkpoint (bad header)")
    digest, payload = blob[len(MAGIC) : header], blob[header:]
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpoint(f"{path.name}: digest mismatch (truncated or corrupted)")
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:
        raise CorruptCheckpoint(f"{path.name}: cannot decode: {error}") from error


def read_newest_valid(folder: Path, report: Callable[[str], None]) -> tuple[int, dict[str, Any]] | None:
    """The newest checkpoint that passes its checks; each one skipped is `report`ed."""
    for step, path in reversed(list_checkpoints(folder)):
        try:
            return step, read_checkpoint(path)
        except (CorruptCheckpoint, OSError) as error:
            report(f"skipping corrupt checkpoint: {error}")
    return None
