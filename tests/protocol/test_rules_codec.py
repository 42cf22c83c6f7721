"""The swarm's rules on the wire: SwarmSchedule's rule fields round-trip, are strictly decoded,
and a peer speaking the previous protocol version is refused with one clear line."""

from __future__ import annotations

import hashlib
import math

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec, limits
from protocol.envelope import SIGNING_DOMAIN, peer_id_from_seed, public_key_from_seed, seal
from protocol.errors import ProtocolError
from protocol.messages import PROTOCOL_VERSION, Hello, SwarmSchedule
from swarmp2p.hello import VersionMismatch, open_hello
from tests.helpers.strategies import swarm_rules, swarm_schedules

SEED = hashlib.sha256(b"rules codec test key").digest()
PEER = peer_id_from_seed(SEED)


def _hello(schedule: SwarmSchedule) -> Hello:
    return Hello(PROTOCOL_VERSION, PEER, schedule, 3, ("/ip4/127.0.0.1/tcp/4001",), "tiny")


def _raw_hello(schedule_body: dict, version: int = PROTOCOL_VERSION) -> bytes:
    body = {
        "protocol_version": version,
        "peer_id": PEER,
        "schedule": schedule_body,
        "current_round": 3,
        "listen_addrs": ["/ip4/127.0.0.1/tcp/4001"],
        "model": "tiny",
    }
    return msgpack.packb({"v": version, "k": "hello", "b": body}, use_bin_type=True)


def _schedule_body(schedule: SwarmSchedule) -> dict:
    return {
        "swarm_id": schedule.swarm_id,
        "genesis_ms": schedule.genesis_ms,
        "round_ms": schedule.round_ms,
        "stage_count": schedule.stage_count,
        "seed": schedule.seed,
        "tasks": list(schedule.tasks),
        "weights": list(schedule.weights),
        "questions_per_round": schedule.questions_per_round,
        "format_reward": schedule.format_reward,
        "difficulty": schedule.difficulty,
        "game": schedule.game,
    }


@given(swarm_schedules)
def test_schedule_with_rules_round_trips_inside_a_hello(schedule):
    hello = _hello(schedule)
    codec.validate(schedule)  # what loading swarm.json and building a new swarm check: same schema
    decoded = codec.decode(codec.encode(hello))
    assert decoded == hello
    assert type(decoded.schedule.tasks) is tuple and type(decoded.schedule.weights) is tuple
    assert all(type(w) is float for w in decoded.schedule.weights)
    assert type(decoded.schedule.format_reward) is float


# (field, bad value, reason): every way a hostile or confused peer can get a rule wrong.
_NAME_CAP = limits.MAX_TASK_NAME_BYTES
BAD_RULES: list[tuple[str, object, str]] = [
    ("format_reward", math.nan, "non_finite"),
    ("format_reward", math.inf, "non_finite"),
    ("format_reward", -math.inf, "non_finite"),
    ("format_reward", 1.5, "out_of_range"),
    ("format_reward", -0.1, "out_of_range"),
    ("format_reward", 0, "bad_type"),  # an int where the wire carries float64
    ("format_reward", "0.2", "bad_type"),
    ("format_reward", None, "bad_type"),
    ("weights", [math.nan], "non_finite"),
    ("weights", [math.inf], "non_finite"),
    ("weights", [-1.0], "out_of_range"),
    ("weights", [limits.MAX_TASK_WEIGHT * 2], "out_of_range"),
    ("weights", [1], "bad_type"),
    ("weights", "1.0", "bad_type"),
    ("weights", [1.0] * (limits.MAX_SCHEDULE_TASKS + 1), "oversized"),
    ("tasks", "basic_arithmetic", "bad_type"),  # a str is not an array of str
    ("tasks", [1], "bad_type"),
    ("tasks", [b"basic_arithmetic"], "bad_type"),
    ("tasks", [""], "out_of_range"),
    ("tasks", ["t" * (_NAME_CAP + 1)], "oversized"),
    ("tasks", [f"t{i}" for i in range(limits.MAX_SCHEDULE_TASKS + 1)], "oversized"),
    ("tasks", [], "out_of_range"),
    ("tasks", ["a", "a"], "inconsistent"),
    ("questions_per_round", 0, "out_of_range"),
    ("questions_per_round", limits.MAX_GROUPS_PER_BATCH + 1, "out_of_range"),
    ("questions_per_round", True, "bad_type"),
    ("questions_per_round", 4.0, "bad_type"),
    ("difficulty", limits.MIN_DIFFICULTY - 1, "out_of_range"),
    ("difficulty", limits.MAX_DIFFICULTY + 1, "out_of_range"),
    ("difficulty", "easy", "bad_type"),
    ("game", "", "out_of_range"),
    ("game", "g" * (limits.MAX_GAME_NAME_BYTES + 1), "oversized"),
    ("game", 3, "bad_type"),
]


def _inconsistent_or_misshapen(case: str, schedule: SwarmSchedule, body: dict, data: st.DataObject) -> str:
    if case == "length":
        body["weights"] = [1.0] * (len(schedule.tasks) + data.draw(st.integers(1, 3)))
        return "inconsistent"
    if case == "zero_sum":
        body["weights"] = [0.0] * len(schedule.tasks)
        return "inconsistent"
    if case == "extra":
        body[data.draw(st.sampled_from(["task_weights", "format", "rules", "x"]))] = 1
        return "extra_key"
    # "missing": e.g. a schedule as protocol 1 (no rules) or 3 (no game) had it, under the
    # current version number
    keys = ["tasks", "weights", "questions_per_round", "format_reward", "difficulty", "game"]
    del body[data.draw(st.sampled_from(keys))]
    return "missing_key"


@given(swarm_schedules, st.sampled_from([*BAD_RULES, "length", "zero_sum", "extra", "missing"]), st.data())
def test_a_bad_rule_is_a_protocol_error_with_its_reason(schedule, bad, data):
    body = _schedule_body(schedule)
    if isinstance(bad, tuple):
        field, value, expected = bad
        body[field] = value
    else:
        expected = _inconsistent_or_misshapen(bad, schedule, body, data)
    with pytest.raises(ProtocolError) as caught:
        codec.decode(_raw_hello(body))
    assert caught.value.reason == expected, (bad, caught.value)


# Encoding accepts an int where a float is expected (a documented convenience); all else fails.
BAD_EVEN_TO_ENCODE = [bad for bad in BAD_RULES if bad[1] != 0 and bad[1] != [1]]


@given(swarm_rules(), st.sampled_from(BAD_EVEN_TO_ENCODE))
def test_encoding_refuses_what_decoding_would_reject(rules, bad):
    # A node never sends a schedule its peers would drop: validate (used on a new swarm's rules
    # and on swarm.json) and encode both refuse it with the same reason.
    field, value, reason = bad
    schedule = SwarmSchedule("s", 0, 1000, 1, 1, **{**rules, field: value})
    with pytest.raises(ProtocolError) as caught:
        codec.validate(schedule)
    assert caught.value.reason == reason
    with pytest.raises(ProtocolError) as caught:
        codec.encode(_hello(schedule))
    assert caught.value.reason == reason


# ---- the previous protocol version ---------------------------------------------------------

OLD_SCHEDULE = {"swarm_id": "old", "genesis_ms": 0, "round_ms": 30_000, "stage_count": 1, "seed": 9}


def _old_sealed_hello(envelope_version: int = 1, inner_version: int = 1) -> bytes:
    """A hello exactly as a protocol-1 node seals it (its schedule has no rules)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    inner = _raw_hello(OLD_SCHEDULE, version=inner_version)
    signature = Ed25519PrivateKey.from_private_bytes(SEED).sign(SIGNING_DOMAIN + inner)
    return msgpack.packb(
        {"v": envelope_version, "k": "env", "m": inner, "pk": public_key_from_seed(SEED), "sig": signature},
        use_bin_type=True,
    )


def test_protocol_is_version_4():
    # 4: schedules name their game; 3: completions carry their sampling log-probs
    # (protocol/logprobs.py); 2: schedules carry rules.
    assert PROTOCOL_VERSION == 4


def test_a_version_3_hello_is_bad_version():
    # A protocol-3 peer named the game by the stage count: it must not be mistaken for one here.
    body = _schedule_body(SwarmSchedule("s", 0, 3000, 3, 1, tasks=("a",)))
    del body["game"]
    with pytest.raises(ProtocolError) as caught:
        codec.decode(_raw_hello(body, version=3))
    assert caught.value.reason == "bad_version"


def test_old_version_message_is_bad_version_not_a_crash():
    with pytest.raises(ProtocolError) as caught:
        codec.decode(_raw_hello(OLD_SCHEDULE, version=1))
    assert caught.value.reason == "bad_version"


@pytest.mark.parametrize(
    ("envelope_version", "inner_version"), [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (7, 7)]
)
def test_old_peer_hello_gives_one_clear_line(envelope_version, inner_version):
    with pytest.raises(VersionMismatch) as caught:
        open_hello(_old_sealed_hello(envelope_version, inner_version), PEER)
    text = str(caught.value)
    spoken = inner_version if envelope_version == PROTOCOL_VERSION else envelope_version
    assert text == f"peer speaks protocol {spoken}, we speak {PROTOCOL_VERSION}"
    assert "\n" not in text


def test_current_hello_opens():
    schedule = SwarmSchedule("s", 0, 1000, 1, 1, tasks=("basic_arithmetic",), format_reward=0.2)
    assert open_hello(seal(_hello(schedule), SEED), PEER).schedule == schedule
