"""`swarmp2p.chain.anvil.Anvil` leaves no anvil behind.

tools/anvil's `anvil` is a Node shim (`bin.mjs`) that spawns the native binary. Killing the shim
alone (SIGKILL, a crash, a test's `process.kill()`) orphaned the native anvil: two of them were
still listening after a full CI run. `stop()` must end the whole process group, even when the
shim is already gone.
"""

from __future__ import annotations

import os
import signal

import pytest

from swarmp2p.chain.anvil import Anvil, rpc_ready


def test_stop_ends_anvil_even_after_its_launcher_was_killed() -> None:
    anvil = Anvil().start()
    try:
        assert rpc_ready(anvil.url)
        assert anvil.process is not None
        anvil.process.send_signal(signal.SIGKILL)  # the launcher dies, as in a crash
        anvil.process.wait()
    finally:
        anvil.stop()
    assert not rpc_ready(anvil.url), "an anvil still answers on the port after stop()"


def test_stop_ends_the_whole_process_group() -> None:
    anvil = Anvil().start()
    assert anvil.process is not None
    group = anvil.process.pid
    anvil.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)
    assert not rpc_ready(anvil.url)
