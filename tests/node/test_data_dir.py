"""One process per data dir (swarmp2p/datadir.py), and `swarmp2p train` in a dir of its own.

A node and `train` once shared `.swarmp2p`: train resumed from the node's checkpoint, trained on
it alone and pruned the node's newest checkpoints. Two nodes on one dir shared a peer id and
overwrote each other's files. Now the dir is locked by whoever runs in it, and the second process
gets one line naming the holder's pid and exit code 2.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from swarmp2p.datadir import LOCK_FILE, DataDirInUse, lock_data_dir
from tests.helpers.fast_config import ENV, TRAINER_TOML


def _swarmp2p(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=timeout,
    )


class Holder:
    """Another process holding a data dir's lock (as a running node or train would)."""

    def __init__(self, data_dir: Path) -> None:
        code = (
            "import sys, time\n"
            "from pathlib import Path\n"
            "from swarmp2p.datadir import lock_data_dir\n"
            f"lock = lock_data_dir(Path({str(data_dir)!r}))\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n"
        )
        data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "locked"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@pytest.fixture
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    holders: list[Holder] = []

    def hold(data_dir: Path) -> Holder:
        holders.append(Holder(data_dir))
        return holders[-1]

    yield hold
    for h in holders:
        h.kill()


def _one_busy_line(done: subprocess.CompletedProcess[str], pid: int) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"pid {pid}" in lines[0] and "in use" in lines[0], lines[0]
    return lines[0]


def test_a_second_lock_in_the_same_dir_names_the_holder_and_a_released_lock_is_free(tmp_path: Path) -> None:
    lock = lock_data_dir(tmp_path)
    mode = stat.S_IMODE((tmp_path / LOCK_FILE).stat().st_mode)
    assert mode == 0o600, oct(mode)
    with pytest.raises(DataDirInUse) as caught:
        lock_data_dir(tmp_path)
    assert caught.value.pid == os.getpid()
    assert f"pid {os.getpid()}" in str(caught.value) and "\n" not in str(caught.value)
    lock.release()
    with lock_data_dir(tmp_path):
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    held = holder(tmp_path)
    with pytest.raises(DataDirInUse) as caught:
        lock_data_dir(tmp_path)
    assert caught.value.pid == held.process.pid
    held.kill()  # kill -9: no clean-up ran, the kernel dropped the lock
    with lock_data_dir(tmp_path):
        pass


def test_node_on_a_held_data_dir_is_one_line_and_exit_2(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    held = holder(data)
    done = _swarmp2p("node", "--data-dir", str(data), cwd=tmp_path, timeout=120)
    assert str(data) in _one_busy_line(done, held.process.pid)
    assert not (data / "identity.key").exists()  # it touched nothing in the dir


def test_train_on_a_held_data_dir_is_one_line_and_exit_2(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    held = holder(tmp_path / ".swarmp2p-train")  # train's default dir
    done = _swarmp2p("train", "--steps", "1", "--threads", "1", cwd=tmp_path, timeout=120)
    _one_busy_line(done, held.process.pid)


def test_train_has_its_own_data_dir_and_writes_tensorboard_scalars(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # A node's data dir in the same folder, with a checkpoint train must neither resume nor prune.
    node_dir = tmp_path / ".swarmp2p" / "checkpoints" / "step-000033"
    node_dir.mkdir(parents=True)
    (node_dir / "marker").write_text("the node's model")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / ".swarmp2p").rglob("*"))
    config = tmp_path / "train.toml"
    config.write_text(TRAINER_TOML)
    done = _swarmp2p(
        "train", "--config", str(config), "--steps", "3", "--questions", "2", "--eval-every", "2",
        "--save-every", "2", "--tensorboard", "tb", "--out", "out", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed" not in done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr  # no library deprecation notice among its lines
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / ".swarmp2p").rglob("*")) == before
    own = tmp_path / ".swarmp2p-train"
    assert any((own / "checkpoints").iterdir()), "train saved no checkpoint in its own dir"
    assert (own / LOCK_FILE).read_text() == ""  # released at exit: no pid of a finished process

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/reward", "eval/accuracy", "eval/reward"} <= tags, tags
    rewards = events.Scalars("train/reward")
    assert [event.step for event in rewards] == [1, 2, 3]
    assert all(0.0 <= event.value <= 1.0 for event in rewards)
    accuracy = events.Scalars("eval/accuracy")
    # Before training, then every 2 model updates (a step with no informative group updates nothing).
    assert accuracy[0].step == 0
    assert all(0.0 <= event.value <= 1.0 for event in accuracy)


def test_train_takes_its_tensorboard_folder_from_the_config_file(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tmp_path / "train.toml"
    config.write_text(TRAINER_TOML + 'tensorboard = "tb-from-config"\n')
    done = _swarmp2p(
        "train", "--config", str(config), "--steps", "1", "--questions", "2", "--eval-every", "0",
        "--out", "out", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    events = EventAccumulator(str(tmp_path / "tb-from-config"))
    events.Reload()
    assert "train/reward" in events.Tags()["scalars"]
