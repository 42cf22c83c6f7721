"""One process per data dir: an OS lock on `<data_dir>/lock`, held for the life of the process.

Two processes on one data dir (two nodes, or a node and `swarmp2p train`) would share a peer id,
write duplicate lines into rounds.jsonl, point node.json at each other and overwrite each other's
checkpoints. `lock_data_dir` takes an exclusive `fcntl.flock` on the lock file: the kernel drops
it when the process dies however it dies (kill -9 included), so a crash never leaves a stale
lock behind, and the file itself may stay. The holder writes its pid into the file so the
second process can say who holds the dir. The file is created 0600, like the identity key.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = "lock"


class DataDirInUse(Exception):
    """Another live process holds the data dir. `str()` is one line naming its pid."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "another process"
        super().__init__(
            f"data dir {data_dir} is in use by {holder} (a running swarmp2p node or train); "
            "stop it first or pass another --data-dir"
        )
        self.data_dir = data_dir
        self.pid = pid


class DataDirLock:
    """The held lock; `release()` (or leaving the `with` block, or process exit) gives it back."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)  # no pid of a finished process left behind
            except OSError:
                pass
            os.close(fd)  # closing the only descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def holder_pid(path: Path) -> int | None:
    """The pid written into a lock file, or None (empty, unreadable or garbage)."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def lock_data_dir(data_dir: Path) -> DataDirLock:
    """Lock `data_dir` (which must exist) for this process. Raises DataDirInUse when another
    process holds it, OSError when the lock file cannot be opened."""
    path = Path(data_dir) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DataDirInUse(Path(data_dir), holder_pid(path)) from None
        raise
    try:
        os.fchmod(fd, 0o600)  # a file left by an older run with a looser mode
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        os.close(fd)
        raise
    return DataDirLock(path, fd)
