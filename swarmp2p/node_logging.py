"""How a node logs, and what it says about the threads it computes with."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any


class PlainFormatter(logging.Formatter):
    """Log records that read like the node's printed lines (round lines, "listening on ..."):
    the message for info, "warning: ..." / "error: ..." above it, with the logger's name only when
    it is not ours. Times and logger names are for --log-level debug (DEBUG_FORMAT)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        if record.levelno < logging.WARNING:
            return text
        level = record.levelname.lower()
        ours = record.name == "swarmp2p" or record.name.startswith("swarmp2p.")
        return f"{level}: {text}" if ours else f"{level} ({record.name}): {text}"


DEBUG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(DEBUG_FORMAT) if level == "debug" else PlainFormatter())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.captureWarnings(True)  # Python warnings through the same handler and format
    if level != "debug":
        quiet_library_warnings()
    logging.getLogger("swarmp2p").setLevel(level.upper())
    # py-libp2p logs routine transport churn (refused dials, peers without our protocols, DHT
    # misses) at WARNING/ERROR; the adapter counts what matters, so keep its voice for --log-level
    # debug. Importing it first matters: its import resets the "libp2p" logger to WARNING with no
    # handler, and Python's last-resort handler then prints every warning bare on stderr.
    import libp2p  # noqa: F401

    libp2p_logger = logging.getLogger("libp2p")
    debug = level == "debug"
    libp2p_logger.setLevel(logging.DEBUG if debug else logging.CRITICAL)
    # Debug: through the node's own handler and format. Otherwise a handler that drops everything
    # (some py-libp2p modules set their own INFO level, which the level above does not cover).
    libp2p_logger.propagate = debug
    if not debug and not any(isinstance(h, logging.NullHandler) for h in libp2p_logger.handlers):
        libp2p_logger.addHandler(logging.NullHandler())
    # huggingface_hub prints each download retry twice (its own handler and ours); the one-line
    # error that follows says what failed.
    logging.getLogger("huggingface_hub").setLevel(logging.DEBUG if debug else logging.ERROR)


def quiet_library_warnings() -> None:
    """Deprecation notices are for the authors of the code that calls a library (torch and
    transformers print them bare between a node's round lines or train's progress), not for who
    runs the command."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def thread_counts() -> dict[str, Any]:
    """What this process computes with: torch's intra-op threads and the OpenMP / MKL settings."""
    import torch

    return {
        "torch": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "mkl": os.environ.get("MKL_NUM_THREADS"),
    }
