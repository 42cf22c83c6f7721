"""Simulation scenarios: every knob of a run, loadable from a strict TOML file.

File layout (every section and key optional; unknown keys are errors, so a typo never silently
does nothing):

    name = "churn30"
    peers = 100           rounds = 50          seed = 7
    round_s = 30.0        questions_per_round = 4
    n_local = 4           n_external = 4       max_groups_per_peer = 2
    collect_fraction = 0.6  group_size = 4     fetch_sample = 8 (0 = fetch every batch)
    dht_sweep = true
    policy = "sim" | "trainer"   coordinator = "schedule" | "chain"   tasks = ["..."]
    game = "single" | "answer-critique-resolve" | "answer-verify"   (protocol/games.py's registry)
    workers = 1           (processes to spread the peers over: simulator/shards.py)

    [network]   latency_min_ms, latency_max_ms, jitter_ms, loss, gossip_loss, upload_mbit, time_grid_ms
    [faults]    churn_leave, churn_join, crash_rate, crash_restart_s, late_join_fraction,
                late_join_round, slow_fraction, slowdown
    [[faults.partition]]  start_round, heal_round, fraction      (repeatable)
    [byzantine] fraction, kinds = ["forge", "malformed", "oversized", "replay", "impersonate", "flood"]
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import attrs

from protocol.games import SINGLE, spec_of
from swarmp2p import peer_knobs as knobs

MAX_TRAINER_PEERS = 32
BYZANTINE_KINDS = ("forge", "malformed", "oversized", "replay", "impersonate", "flood")
SCENARIO_DIR = Path(__file__).parent / "scenarios"


def _known_game(name: str) -> None:
    spec_of(name)  # ValueError naming the registry's games when `name` is none of them


class ScenarioError(Exception):
    """A scenario file or override is invalid; str() is one line naming the key."""


def _fraction(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name}: expected a number in [0, 1], got {value!r}")


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name}: expected a number > 0, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name}: expected a number >= 0, got {value!r}")


@attrs.frozen
class NetworkSpec:
    latency_min_ms: float = attrs.field(default=10.0, validator=_non_negative)
    latency_max_ms: float = attrs.field(default=80.0, validator=_non_negative)
    jitter_ms: float = attrs.field(default=5.0, validator=_non_negative)
    loss: float = attrs.field(default=0.0, validator=[_fraction, attrs.validators.lt(1.0)])
    gossip_loss: float = attrs.field(default=0.0, validator=_fraction)
    """Extra loss of announcements only (direct fetches and the DHT still work)."""
    upload_mbit: float = attrs.field(default=100.0, validator=_positive)
    time_grid_ms: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    """Virtual-time resolution of the network (see simulator.network.LinkModel.time_grid_ms)."""

    def __attrs_post_init__(self) -> None:
        if self.latency_max_ms < self.latency_min_ms:
            raise ValueError("latency_max_ms: must be >= latency_min_ms")


@attrs.frozen
class PartitionSpec:
    """The first `fraction` of peers (by index) are cut off from the rest for [start_round, heal_round)."""

    start_round: int = attrs.field(validator=attrs.validators.ge(0))
    heal_round: int = attrs.field(validator=attrs.validators.ge(1))
    fraction: float = attrs.field(default=0.5, validator=_fraction)

    def __attrs_post_init__(self) -> None:
        if self.heal_round <= self.start_round:
            raise ValueError("heal_round: must be > start_round")


@attrs.frozen
class FaultSpec:
    churn_leave: float = attrs.field(default=0.0, validator=_fraction)
    """Per round, the chance that an online honest peer leaves (at a random time in the round)."""
    churn_join: float = attrs.field(default=0.5, validator=_fraction)
    """Per round, the chance that a peer that left comes back (same identity, its checkpoint)."""
    crash_rate: float = attrs.field(default=0.0, validator=_fraction)
    """Per round, the chance that an online honest peer crashes mid-round."""
    crash_restart_s: float = attrs.field(default=10.0, validator=_non_negative)
    late_join_fraction: float = attrs.field(default=0.0, validator=_fraction)
    late_join_round: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    slow_fraction: float = attrs.field(default=0.0, validator=_fraction)
    slowdown: float = attrs.field(default=4.0, validator=_positive)
    partition: tuple[PartitionSpec, ...] = ()


@attrs.frozen
class ByzantineSpec:
    fraction: float = attrs.field(default=0.0, validator=_fraction)
    kinds: tuple[str, ...] = attrs.field(default=BYZANTINE_KINDS)

    @kinds.validator
    def _known(self, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        unknown = [kind for kind in value if kind not in BYZANTINE_KINDS]
        if unknown or not value:
            raise ValueError(f"kinds: unknown {unknown} (known: {', '.join(BYZANTINE_KINDS)})")


@attrs.frozen
class Scenario:
    name: str = "baseline"
    peers: int = attrs.field(default=10, validator=attrs.validators.ge(2))
    rounds: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    seed: int = attrs.field(default=1, validator=attrs.validators.ge(0))
    round_s: float = attrs.field(default=30.0, validator=_positive)
    questions_per_round: int = attrs.field(
        default=knobs.QUESTIONS_PER_ROUND, validator=attrs.validators.ge(1)
    )
    n_local: int = attrs.field(default=knobs.N_LOCAL, validator=attrs.validators.ge(0))
    n_external: int = attrs.field(default=knobs.N_EXTERNAL, validator=attrs.validators.ge(0))
    max_groups_per_peer: int = attrs.field(
        default=knobs.MAX_GROUPS_PER_PEER, validator=attrs.validators.ge(1)
    )
    collect_fraction: float = attrs.field(default=knobs.COLLECT_FRACTION, validator=[_fraction, _positive])
    group_size: int = attrs.field(default=4, validator=attrs.validators.ge(2))
    fetch_sample: int = attrs.field(default=8, validator=attrs.validators.ge(0))
    """Batches each peer fetches and verifies per round (0 = every announced batch)."""
    dht_sweep: bool = True
    """Look up in the DHT the batches of known peers whose announcement did not arrive."""
    policy: str = attrs.field(default="sim", validator=attrs.validators.in_(("sim", "trainer")))
    """"sim": the cheap simulated learner; "trainer": the real trainer with the tiny model (<= 32 peers)."""
    coordinator: str = attrs.field(default="schedule", validator=attrs.validators.in_(("schedule", "chain")))
    """"schedule": chain-less round clock; "chain": the SwarmCoordinator contract on one in-process chain."""
    tasks: tuple[str, ...] = ()
    """Task names; empty: the policy's default (simulated tasks, or two reasoning-gym tasks)."""
    game: str = attrs.field(default=SINGLE, validator=lambda _s, _a, name: _known_game(name))
    """The swarm's game, a row of protocol/games.py's registry."""
    network: NetworkSpec = NetworkSpec()
    faults: FaultSpec = FaultSpec()
    byzantine: ByzantineSpec = ByzantineSpec()
    workers: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """Processes the run is spread over (simulator/shards.py). A report is reproduced by its
    scenario, this included: 2 workers draw differently from 1, as exactly each time."""

    def __attrs_post_init__(self) -> None:
        if self.workers > 1 and (self.policy != "sim" or self.coordinator != "schedule"):
            raise ValueError(
                f"workers: {self.workers} needs policy 'sim' and the schedule coordinator "
                f"(got policy {self.policy!r}, coordinator {self.coordinator!r})"
            )
        if self.workers > self.peers:
            raise ValueError(f"workers: {self.workers} is more than the {self.peers} peers")
        if spec_of(self.game).stage_count > 1 and self.coordinator == "chain":
            # The simulated chain has one stage a round: later stages would never open.
            raise ValueError(f"game: {self.game} needs the schedule coordinator, not the chain")
        if self.policy == "trainer" and self.peers > MAX_TRAINER_PEERS:
            raise ValueError(
                f"policy: 'trainer' runs a real model per peer; "
                f"at most {MAX_TRAINER_PEERS} peers, got {self.peers}"
            )

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=True)
        if self.game == SINGLE:
            del data["game"]  # reports of the single-stage game stay byte-identical to before
        if self.workers == 1:
            del data["workers"]  # so do reports of one-process runs
        return data


def _build(cls: type, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise ScenarioError(f"scenario error: [{where}] must be a table, got {type(table).__name__}")
    fields = {field.name: field for field in attrs.fields(cls)}
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key not in fields:
            raise ScenarioError(f"scenario error: {where}.{key}: unknown key (known: {', '.join(fields)})")
        values[key] = _convert(cls, fields[key], raw, f"{where}.{key}")
    try:
        return cls(**values)
    except (ValueError, TypeError) as error:
        raise ScenarioError(f"scenario error: {where}: {error}") from None


def _convert(cls: type, field: attrs.Attribute, raw: Any, where: str) -> Any:
    default = field.default
    if cls is FaultSpec and field.name == "partition":
        if not isinstance(raw, list):
            raise ScenarioError(f"scenario error: {where}: expected an array of tables")
        return tuple(_build(PartitionSpec, item, where) for item in raw)
    if isinstance(default, NetworkSpec | FaultSpec | ByzantineSpec):
        return _build(type(default), raw, where)
    if field.name in ("kinds", "tasks"):
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise ScenarioError(f"scenario error: {where}: expected an array of strings")
        return tuple(raw)
    expected = type(default) if default is not attrs.NOTHING else (float if field.name == "fraction" else int)
    if expected is float and isinstance(raw, int) and not isinstance(raw, bool):
        raw = float(raw)
    if (isinstance(raw, bool) and expected is not bool) or not isinstance(raw, expected):
        raise ScenarioError(f"scenario error: {where}: expected {expected.__name__}, got {raw!r}")
    return raw


def scenario_from_mapping(data: dict[str, Any], *, where: str = "scenario") -> Scenario:
    return _build(Scenario, data, where)


def load_scenario(path: Path | str | None = None, **overrides: Any) -> Scenario:
    """Read `path` (a file, or the name of a built-in scenario) and apply top-level overrides
    (None values are ignored). Raises ScenarioError with one line on any problem."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.exists() and (SCENARIO_DIR / f"{path}.toml").exists():
            file = SCENARIO_DIR / f"{path}.toml"
        try:
            data = tomllib.loads(file.read_text())
        except FileNotFoundError:
            raise ScenarioError(f"scenario error: file not found: {path}") from None
        except OSError as error:
            raise ScenarioError(f"scenario error: cannot read {path}: {error.strerror}") from None
        except tomllib.TOMLDecodeError as error:
            raise ScenarioError(f"scenario error: {file.name}: invalid TOML: {error}") from None
        except UnicodeDecodeError:
            raise ScenarioError(f"scenario error: {file.name}: not UTF-8 text") from None
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    return scenario_from_mapping(data, where=Path(path).stem if path is not None else "scenario")


def builtin_scenarios() -> list[str]:
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.toml"))
