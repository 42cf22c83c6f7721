"""py-libp2p's routine warnings stay out of a node's output unless --log-level debug asks for them."""

from __future__ import annotations

import subprocess
import sys


def test_libp2p_warnings_are_silent_at_the_default_level() -> None:
    # A fresh interpreter: py-libp2p configures its logger when it is first imported, which in a
    # node happens after the node configured logging (it used to re-enable its warnings, printed
    # bare by Python's last-resort handler: "Value not found for key ...", 40 lines in 5 minutes).
    code = (
        "import logging\n"
        "from swarmp2p.node_logging import configure_logging\n"
        "configure_logging('info')\n"
        "import libp2p.kad_dht.kad_dht as k\n"
        "k.logger.warning('Value not found for key /swarmp2p/x')\n"
        "chatty = logging.getLogger('libp2p.network.auto_connector')\n"
        "chatty.setLevel(logging.INFO)\n"  # py-libp2p modules may set their own level
        "chatty.info('AUTO_CONNECTOR_STATE: num_connections=0')\n"
        "chatty.warning('a warning of its own')\n"
        "logging.getLogger('swarmp2p.node').warning('our own warning')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Value not found" not in done.stderr
    assert "AUTO_CONNECTOR" not in done.stderr and "a warning of its own" not in done.stderr
    assert "our own warning" in done.stderr


def test_log_lines_read_like_the_node_s_other_lines() -> None:
    """No `2026-11-22 23:49:25,380 swarmp2p.node INFO` prefix between plain round lines: info is the
    message, a warning says so (and whose it is when not ours); --log-level debug keeps times."""
    code = (
        "import logging\n"
        "from swarmp2p.node_logging import configure_logging\n"
        "configure_logging('{level}')\n"
        "logging.getLogger('swarmp2p.node_setup').info('joining at round 5, in 3.0s')\n"
        "logging.getLogger('swarmp2p.peer').warning('register failed: x')\n"
        "logging.getLogger('transformers').error('something of theirs')\n"
        "import warnings\n"
        "warnings.warn('`past_key_values` is deprecated', FutureWarning)\n"  # a library's, for its devs
    )
    done = subprocess.run(
        [sys.executable, "-c", code.format(level="info")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "joining at round 5, in 3.0s",
        "warning: register failed: x",
        "error (transformers): something of theirs",
    ]
    debug = subprocess.run(
        [sys.executable, "-c", code.format(level="debug")], capture_output=True, text=True, timeout=120
    )
    assert "swarmp2p.node_setup INFO joining at round 5" in debug.stderr
    assert "past_key_values" in debug.stderr
