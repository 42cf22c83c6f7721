"""What a node writes about each round: one log line and one JSON line in <data_dir>/rounds.jsonl
(plus a TensorBoard point), and the policy wrapper that times generate / train / save for it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from swarmp2p.heldout import describe as describe_eval
from swarmp2p.heldout import describe_deferral
from swarmp2p.round_record import FATES

ROUNDS_FILE = "rounds.jsonl"


class TimedPolicy:
    """The policy as the Peer sees it, timing each call: the durations land in rounds.jsonl,
    so a slow round can be told apart from a slow network when reading a node's log."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self.seconds: dict[str, float] = {}
        self._threads: int | None = None  # asked for by set_compute_threads; None: as started

    def _timed(self, name: str, *args: Any) -> Any:
        if self._threads is not None:
            self._use_threads(self._threads)
        started = time.monotonic()
        try:
            return getattr(self._policy, name)(*args)
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)

    def generate(self, questions: Any) -> Any:
        return self._timed("generate", questions)

    def train(self, groups: Any) -> Any:
        return self._timed("train", groups)

    def save(self) -> None:
        self._timed("save")

    def load(self) -> bool:
        return bool(self._timed("load"))

    def evaluate(self) -> Any:
        return self._timed("evaluate")

    @property
    def cancellable(self) -> bool:
        return bool(self._policy.cancellable)

    def cancel(self) -> None:
        self._policy.cancel()

    def reset_cancel(self) -> None:
        self._policy.reset_cancel()

    def compute_threads(self) -> int:
        """The CPU threads torch computes on."""
        import torch

        return int(torch.get_num_threads())

    def set_compute_threads(self, threads: int) -> None:
        """Compute on `threads` threads from the next call on. torch's count is per OS thread
        once a thread has computed (OpenMP's setting): set here it reaches only threads started
        later, so every call sets it again in the thread it runs in (the worker)."""
        self._threads = threads
        self._use_threads(threads)

    @staticmethod
    def _use_threads(threads: int) -> None:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def take_timings(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken

    def __getattr__(self, name: str) -> Any:  # registry, model, ...
        return getattr(self._policy, name)


class RoundLog:
    """Turns RoundRecords into a log line and a JSON line in rounds.jsonl."""

    def __init__(
        self,
        path: Path,
        peer_id: str,
        peers: Callable[[], Collection[str]],
        echo: Callable[[str], None],
        *,
        timings: Callable[[], dict[str, float]] = dict,
        network_drops: Callable[[], dict[str, int]] = dict,
        board: Any = None,
    ) -> None:
        self.board = board  # a swarmp2p.tblog.TensorBoardLog, or None
        self.path = path
        self.peer_id = peer_id
        self.peers = peers  # the ids of the peers connected now
        self._connected: set[str] = set()
        self._last_round = -1
        self.echo = echo
        self.timings = timings
        self.network_drops = network_drops

    def __call__(self, record: Any) -> None:
        data = record.to_json()
        data["peer_id"] = self.peer_id
        connected = set(self.peers())
        self._say_joins_and_leaves(connected)
        self._connected, self._last_round = connected, record.round
        data["peers"] = len(connected)
        data["time_ms"] = int(time.time() * 1000)
        data["seconds"] = self.timings()  # generate / train / save durations of this round
        data["network_drops"] = self.network_drops()  # cumulative: failed dials, queue overflows, ...
        with self.path.open("a") as handle:
            handle.write(json.dumps(data, sort_keys=True) + "\n")
        if self.board is not None:
            self.board.round(data)
        reward = "n/a" if record.reward is None else f"{record.reward:.3f}"
        rejected = f"rejected {sum(record.rejected.values())}"
        out_of_round = sum(record.rejected.get(reason, 0) for reason in OUT_OF_ROUND_REJECTIONS)
        if out_of_round:
            rejected += f" ({out_of_round} out of round)"
        said = FATES.get(record.fate, record.fate)
        if record.fate == "reported_late" and record.ends_ms:
            said = f"reported {(record.finished_ms - record.ends_ms) / 1000:.0f} s late"
        state = f" ({said})" if said else ""
        evaluation = ""
        if record.eval is not None:
            evaluation = f" | eval {describe_eval(record.eval)}"
        elif record.eval_deferred is not None:
            evaluation = f" | {describe_deferral(record.eval_deferred)}"
        self.echo(
            f"round {record.round}{state} | reward {reward} | peers {data['peers']} | "
            f"rollouts in {record.rollouts_in} out {record.rollouts_out} | "
            f"trained on {len(record.external_peers_trained_on)} peers | {rejected}{evaluation}"
        )

    def _say_joins_and_leaves(self, connected: set[str]) -> None:
        """One line per peer that joined or left since the last round line (so a peer that
        goes away is said, not only counted)."""
        from swarmp2p.dashboard.names import peer_name

        for peer_id in sorted(self._connected - connected):
            self.echo(f"peer {peer_name(peer_id)} ({peer_id}) left (last seen in round {self._last_round})")
        for peer_id in sorted(connected - self._connected):
            self.echo(f"peer {peer_name(peer_id)} ({peer_id}) joined")


OUT_OF_ROUND_REJECTIONS = ("stale_round", "future_round", "late")
"""Rejections for timing, not misbehaviour (never blamed on the sender): a joiner hears the round
it missed, a slow peer announces after the deadline. The round line says how many of its
rejections these are, so that they do not read as an attack."""
