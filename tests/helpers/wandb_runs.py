"""Read back what an offline W&B run wrote: its history rows, from the run's `.wandb` file.

The file is a LevelDB-style log (a 7-byte ':W&B' header, then 32 KiB blocks of records, each with
a 7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST) of `wandb_internal_pb2.Record`
protobufs. wandb's own reader is in its Go core, so the tests read the format here.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _records(data: bytes) -> list[bytes]:
    records: list[bytes] = []
    pending = b""
    position = _HEADER  # the file's own header
    while position + _HEADER <= len(data):
        left_in_block = _BLOCK - position % _BLOCK
        if left_in_block < _HEADER:
            position += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + _HEADER])
        if kind == 0 and length == 0:  # the block's zero padding
            position += left_in_block
            continue
        chunk = data[position + _HEADER : position + _HEADER + length]
        position += _HEADER + length
        if kind == _FULL:
            records.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            records.append(pending + chunk)
            pending = b""
    return records


def _parsed(run_file: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    parsed = []
    for raw in _records(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


def history(run_root: Path, *, wait_s: float = 60.0) -> list[dict[str, Any]]:
    """The history rows of the one offline run under `run_root` (the folder given to --wandb).

    `run.finish()` can return before wandb-core's writer has flushed the file (seen on a loaded
    2-core CI machine: the file held the run's first records but no history yet), so this waits
    for the run's closing `exit` record before reading the rows.
    """
    files = sorted(Path(run_root).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    deadline = time.monotonic() + wait_s
    while True:
        records = _parsed(files[0])
        kinds = [record.WhichOneof("record_type") for record in records]
        if "exit" in kinds or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "exit" in kinds, f"{files[0]} has no exit record after {wait_s:.0f} s: {kinds}"
    return [
        {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item}
        for record in records
        if record.WhichOneof("record_type") == "history"
    ]
