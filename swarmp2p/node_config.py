"""Settings of `swarmp2p node` and the errors a node reports on start-up.

Apart from node.py so that the CLI can build a NodeConfig (and `--help` show its defaults)
without importing the node's runtime, and so that every module of the node names one NodeError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from protocol.games import GAME_NAMES
from swarmp2p import peer_knobs as knobs
from swarmp2p.config import register_config
from swarmp2p.model_auto import LARGE_POOL, SMALL_POOL
from trainer.config import user_model_cache


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"must be > 0, got {value!r}")


@register_config("node")
@attrs.frozen
class NodeConfig:
    """Settings of `swarmp2p node` ([node] section of the config file, or flags)."""

    data_dir: str = ".swarmp2p"
    """Identity, checkpoints, rounds.jsonl, node.json and swarm.json live here."""
    identity: str = ""
    """Identity key file; empty = <data_dir>/identity.key (created on first run, mode 0600)."""
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    bootstrap: tuple[str, ...] = ()
    """Multiaddrs (…/p2p/<peer id>) of peers to join; empty = start a new swarm."""
    round_seconds: float = attrs.field(default=30.0, validator=_positive)
    """Round length of a NEW swarm (joiners take the swarm's own from its hellos)."""
    model: str = "tiny"
    """"tiny", "auto" (by the accelerator's memory: swarmp2p/model_auto.py), a local model folder
    or a Hugging Face model id."""
    model_pool: tuple[str, ...] = SMALL_POOL
    """Models `--model auto` tries in order on an accelerator with at least model_pool_min_gib."""
    model_pool_large: tuple[str, ...] = LARGE_POOL
    """Models `--model auto` tries in order with at least model_pool_large_min_gib."""
    model_pool_min_gib: float = attrs.field(default=8.0, validator=attrs.validators.ge(0.0))
    """Below this much accelerator memory (and with none) `--model auto` takes the tiny model."""
    model_pool_large_min_gib: float = attrs.field(default=40.0, validator=attrs.validators.ge(0.0))
    dashboard_port: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Port of the local dashboard (127.0.0.1); 0 = no dashboard."""
    dashboard_host: str = "127.0.0.1"
    chain_rpc: str = ""
    contract: str = ""
    eth_key: str = ""
    chain_max_fee_gwei: float = attrs.field(default=500.0, validator=_positive)
    """The most a chain transaction may pay per gas (maxFeePerGas, or a legacy gasPrice)."""
    chain_tip_cap_gwei: float = attrs.field(default=2.0, validator=attrs.validators.ge(0.0))
    """The most a chain transaction may tip per gas (maxPriorityFeePerGas)."""
    questions_per_round: int = attrs.field(
        default=knobs.QUESTIONS_PER_ROUND, validator=attrs.validators.ge(1)
    )
    game: str = attrs.field(default="single", validator=attrs.validators.in_(GAME_NAMES))
    """The game of a NEW swarm, a row of protocol/games.py ("single", "answer-critique-resolve",
    "answer-verify"): its signed schedule names it; joiners play the swarm's. Chain-less swarms
    only for a game of several stages."""
    n_local: int = attrs.field(default=knobs.N_LOCAL, validator=attrs.validators.ge(0))
    n_external: int = attrs.field(default=knobs.N_EXTERNAL, validator=attrs.validators.ge(0))
    max_groups_per_peer: int = attrs.field(
        default=knobs.MAX_GROUPS_PER_PEER, validator=attrs.validators.ge(1)
    )
    hello_interval_s: float = attrs.field(default=5.0, validator=_positive)
    relay_backup_copy: bool = False
    """Gossip relays send one backup copy of each message to the peers they otherwise skip (those
    connected to its author): a second path around a lost packet, for small swarms on lossy
    links (5 peers, 100 ms RTT, 1% loss: p99 +1.5 to +2.1 RTT over loopback instead of +3.3 to
    +4.8), at the cost of ~one duplicate per message and peer (NetworkSettings.relay_backup_copy)."""
    join_timeout_s: float = attrs.field(default=60.0, validator=_positive)
    fetch_timeout_s: float = attrs.field(default=knobs.FETCH_TIMEOUT_S, validator=_positive)
    join_min_remaining: float = attrs.field(
        default=knobs.MIN_ROUND_REMAINING, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    """A node never starts a round with less than this share of its time left (its first round
    after a (re)join, or any later one it reaches late after a long step): it waits for the next
    round instead, since its batch would arrive after everyone's collect deadline. 0: never skip."""
    log_level: str = attrs.field(default="info", validator=attrs.validators.in_(("debug", "info", "warning")))
    tensorboard: str = ""
    """Folder for TensorBoard event files (one point per round: reward, loss, KL, grad norm,
    held-out accuracy; swarmp2p/tblog.py); empty = none."""
    wandb: str = ""
    """Folder for an offline Weights & Biases run with the same scalars (swarmp2p/wandblog.py; needs
    the optional wandb package); empty = none."""
    warmup_steps: int = attrs.field(default=-1, validator=attrs.validators.ge(-1))
    """Supervised format warm-up on first start (no checkpoint yet): -1 = 15 steps for the tiny
    model and none otherwise. A fresh tiny model never writes an answer tag, so without it every
    GRPO group has zero advantage and the node would never learn."""

    def identity_path(self) -> Path:
        return Path(self.identity) if self.identity else Path(self.data_dir) / "identity.key"


class NodeError(Exception):
    """A node cannot start (bad config, unreachable bootstrap, ...). `str()` is one line."""

    exit_code = 1


class DataDirBusy(NodeError):
    """Another live process holds the data dir (swarmp2p/datadir.py): exit code 2."""

    exit_code = 2


NODE_TRAINER_DEFAULTS: dict[str, Any] = {
    "eval_every": 5,
    "lr_decay_steps": 60,
    "model_cache": user_model_cache(),
}
"""[trainer] defaults of `swarmp2p node` that differ from TrainerConfig's (below the config file,
the environment and flags): a held-out evaluation every 5 rounds makes learning visible in the
round lines and on the dashboard (the trainer's own default, 0, is for `swarmp2p train`); the
learning rate follows a cosine from `lr` to 10% of it over the first 60 updates (about 30 minutes
of 30 s rounds) and then stays there: at a constant 3e-4 a node's small per-round batches first
raised held-out accuracy, then one node fell 0.19 in 5 rounds (docs/node.md); the tiny model is
cached per user, so the nodes of one machine share one build."""
