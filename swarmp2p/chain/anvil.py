"""Run foundry's anvil as a local chain on 127.0.0.1 (for `swarmp2p chain devnet` and the tests).

anvil comes from npm (`npm install --prefix tools/anvil`, the package ships the linux binary and
works offline once installed); `SWARMP2P_ANVIL` names another binary; else `anvil` on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from swarmp2p.chain.errors import ChainConfigError, ChainUnavailable

REPO = Path(__file__).resolve().parents[2]
ANVIL_ENV = "SWARMP2P_ANVIL"
# The first account of anvil's default mnemonic ("test test ... junk"), funded with 10k ETH.
DEPLOYER_KEY = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def find_anvil() -> str | None:
    """SWARMP2P_ANVIL, then tools/anvil's npm install (in a source checkout), then PATH."""
    for candidate in (os.environ.get(ANVIL_ENV), str(REPO / "tools/anvil/node_modules/.bin/anvil")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("anvil")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def rpc(url: str, method: str, params: list | None = None, timeout: float = 2.0) -> object:
    """One JSON-RPC call without web3 (readiness checks, anvil_* cheat codes)."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if "error" in answer:
        raise ChainUnavailable(f"{method}: {answer['error'].get('message', answer['error'])}")
    return answer.get("result")


def rpc_ready(url: str) -> bool:
    try:
        rpc(url, "eth_chainId", timeout=1.0)
        return True
    except (OSError, ValueError, ChainUnavailable):
        return False


class Anvil:
    """An anvil process on 127.0.0.1:`port` (a free one by default). Use as a context manager,
    or call `start()` / `stop()`. `block_time`: seconds per block (None: a block per transaction)."""

    def __init__(self, binary: str | None = None, port: int = 0, block_time: float | None = None) -> None:
        found = binary or find_anvil()
        if found is None:
            raise ChainConfigError(
                "anvil is not installed: run `npm install --prefix tools/anvil` in a source checkout, "
                f"install foundry, or set {ANVIL_ENV} to the binary"
            )
        self.binary = found
        self.port = port or free_port()
        self.block_time = block_time
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Anvil:
        args = [self.binary, "--host", "127.0.0.1", "--port", str(self.port), "--silent"]
        if self.block_time:
            args += ["--block-time", f"{self.block_time:g}"]
        # Its own process group: tools/anvil's `anvil` is a Node shim that spawns the native binary,
        # and a signal to the shim alone (SIGKILL, a crash) would orphan the chain on its port.
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while not rpc_ready(self.url):
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise ChainUnavailable(f"anvil exited with {self.process.returncode}: {error[-300:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise ChainUnavailable(f"anvil did not answer on {self.url} within {timeout_s:g} s")
            time.sleep(0.1)
        return self

    def set_balance(self, address: str, wei: int) -> None:
        rpc(self.url, "anvil_setBalance", [address, hex(wei)])

    def stop(self) -> None:
        """End anvil and everything it started (the whole process group), even when the launcher
        has already died."""
        if self.process is None:
            return
        group = self.process.pid  # start_new_session: the group id is the launcher's pid
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break  # nothing of the group is left
            if self._group_gone(group, wait_s):
                break
        if self.process.poll() is None:
            self.process.wait()

    def _group_gone(self, group: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            self.process.poll()  # reap the launcher, or it stays in the group as a zombie
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.05)
        return False

    def __enter__(self) -> Anvil:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
