"""Fail fast on a Hugging Face model id that cannot be fetched: offline, transformers retries for
about a minute (printing each retry) before its error. A node or `train` asks here first."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit


class ModelUnreachable(Exception):
    """One line: the model is neither cached nor downloadable now."""


def _is_hub_id(model: str) -> bool:
    """ "org/name" or "name", not "tiny" and not something that names a local folder (the trainer
    says "model folder ... does not exist" for those)."""
    if model == "tiny" or model.startswith((".", "/", "~")) or Path(model).expanduser().exists():
        return False
    return model.count("/") <= 1 and bool(model.strip("/"))


def _cached(model: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # no hub client: transformers will say what is wrong
        return True
    try:
        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # an id the hub client refuses: leave the message to transformers
        return True


def _offline() -> bool:
    return any(
        os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def is_cached(model: str) -> bool:
    """Whether `model` loads without the hub: not a hub id (tiny, a folder), or already cached."""
    return not _is_hub_id(model) or _cached(model)


def hub_problem(timeout_s: float = 5.0) -> str | None:
    """Why the Hugging Face hub cannot be reached now (offline mode, or a TCP connection that
    fails within `timeout_s`), or None when it can."""
    if _offline():
        return "offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)"
    from huggingface_hub import constants

    endpoint = urlsplit(constants.ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        return f"{host}:{port} cannot be reached ({reason})"
    return None


def check_model_reachable(model: str, timeout_s: float = 5.0) -> None:
    """Raise ModelUnreachable when `model` is a hub id that is not in the local Hugging Face cache
    and the hub cannot be reached (offline mode, or a TCP connection fails within `timeout_s`)."""
    if is_cached(model):
        return
    problem = hub_problem(timeout_s)
    if problem is None:
        return
    if _offline():
        raise ModelUnreachable(
            f"model {model!r} is not in the Hugging Face cache and offline mode is on "
            "(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE); download it first or pass a local folder"
        )
    raise ModelUnreachable(
        f"model {model!r} is not in the Hugging Face cache and {problem}; download it where "
        "there is a network, or pass a local folder"
    )
