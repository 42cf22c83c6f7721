"""The attack kit's flood against running `swarmp2p node` processes, for the soak benches: an
outside host (`python -m netlab.attack_kit flood`) sending throwaway keys' announcements, junk and
wrongly signed gossip at the highest rate the streams take, restarted whenever it ends so that it
lasts as long as the soak."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FLOOD_SECONDS = 300  # one attacker run; its report (a JSON line) lands in the log after each


class Flood:
    def __init__(
        self,
        infos: list[dict[str, Any]],
        round_s: float,
        genesis_s: float,
        log: Path,
        prefix: tuple[str, ...] = (),
    ) -> None:
        """`infos`: the nodes' node.json; the kit announces for the round that its clock (round 0
        at wall time `genesis_s`, `round_s` long) says is current. `prefix` runs the attacker
        elsewhere (`ip netns exec NAME`: a namespace of its own beside the nodes')."""
        self.args = [
            *prefix,
            sys.executable, "-m", "netlab.attack_kit", "flood",
            "--targets", *(info["listen_addrs"][0] for info in infos),
            "--swarm", infos[0]["schedule"]["swarm_id"], "--round-ms", str(int(round_s * 1000)),
            "--genesis", f"{genesis_s:.3f}", "--keys", "300", "--seconds", str(FLOOD_SECONDS),
        ]  # fmt: skip
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        self.log = log.open("a")
        self.process: subprocess.Popen | None = None
        self.runs = 0

    def keep_running(self) -> None:
        """Start the attacker unless it is running (call it at every sample)."""
        if self.process is not None and self.process.poll() is None:
            return
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.runs += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
