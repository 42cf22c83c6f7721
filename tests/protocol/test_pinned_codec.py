"""protocol/codec.py: the line a node logs for each rejected message names what was wrong (a
peer's operator reads it to find the bug in their peer), so the cross-field rules' and the
framing errors' texts are pinned whole, with their counter keys."""

from __future__ import annotations

import attrs
import msgpack
import pytest
from hypothesis import given

from protocol import codec, limits
from protocol.errors import ProtocolError
from protocol.logprobs import MAX_LOGPROBS_BYTES
from protocol.messages import (
    CLASS_OF,
    KIND_OF,
    PROTOCOL_VERSION,
    Completion,
    FetchResponse,
    QuestionRef,
    RewardReport,
    SwarmSchedule,
    WinnersVote,
    WireMessage,
)
from tests.helpers.strategies import wire_messages
from tests.protocol.vectors.golden_fixtures import MESSAGES

REPORT = RewardReport(swarm_id="swarm", round=3, stage=1, peer_id="peer", reward=0.25)


def schedule(**changes: object) -> SwarmSchedule:
    fields: dict[str, object] = {
        "swarm_id": "swarm",
        "genesis_ms": 0,
        "round_ms": 60_000,
        "stage_count": 1,
        "seed": 7,
        "tasks": ("a", "b"),
    }
    fields.update(changes)
    return SwarmSchedule(**fields)  # type: ignore[arg-type]


def error_of(call: object, *args: object) -> str:
    with pytest.raises(ProtocolError) as caught:
        call(*args)  # type: ignore[operator]
    return str(caught.value)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tasks": ()}, "out_of_range: schedule: tasks must name at least one task"),
        ({"tasks": ("a", "a")}, "inconsistent: schedule: tasks has duplicates"),
        ({"weights": (0.0, 0.0)}, "inconsistent: schedule: weights must have a positive sum"),
        ({"weights": (1.0,)}, "inconsistent: schedule: 1 weights for 2 tasks"),
    ],
)
def test_an_unusable_task_mix_is_refused_with_what_is_wrong(
    changes: dict[str, object], expected: str
) -> None:
    assert error_of(codec.validate, schedule(**changes)) == expected


def test_a_usable_task_mix_passes() -> None:
    codec.validate(schedule(weights=(0.0, 2.0)))  # one zero weight is fine: the sum is positive


@pytest.mark.parametrize("response", [FetchResponse(found=True, envelope=b""), FetchResponse(False, b"x")])
def test_a_confused_fetch_answer_says_found_and_envelope_disagree(response: FetchResponse) -> None:
    expected = "inconsistent: fetch_resp: found must be true exactly when envelope is non-empty"
    assert error_of(codec.encode, response) == expected


def test_trailing_bytes_say_so() -> None:
    assert (
        error_of(codec.decode, codec.encode(REPORT) + b"\x00")
        == "malformed: trailing bytes after the message"
    )


def test_a_repeated_map_key_says_so() -> None:
    body = msgpack.packb({"swarm_id": "swarm", "round": 3, "stage": 1, "peer_id": "peer", "reward": 0.25})
    duplicate = bytes([body[0] + 1]) + body[1:] + msgpack.packb("round") + msgpack.packb(4)
    top = msgpack.packb({"v": PROTOCOL_VERSION, "k": "reward"})
    data = bytes([top[0] + 1]) + top[1:] + msgpack.packb("b") + duplicate
    assert error_of(codec.decode, data) == "malformed: duplicate map key"


def test_bad_utf8_says_so() -> None:
    top = msgpack.packb({"v": PROTOCOL_VERSION, "k": "reward", "b": {"swarm_id": "@@@@"}}, use_bin_type=True)
    data = top.replace(b"@@@@", b"\xff\xfe\xfd\xfc")
    assert error_of(codec.decode, data) == "malformed: string is not valid UTF-8"


def test_a_map_key_that_is_not_a_string_is_malformed() -> None:
    # Field names are strings; an int key is not a message with an unknown field but garbage.
    data = msgpack.packb({"v": PROTOCOL_VERSION, "k": "reward", "b": {1: 2}})
    with pytest.raises(ProtocolError) as caught:
        codec.decode(data)
    assert caught.value.reason == "malformed"


def test_an_extension_value_of_any_length_is_refused_before_the_schema() -> None:
    # No msgpack extension type may appear anywhere: even a one-byte one never reaches the schema.
    body = {"swarm_id": msgpack.ExtType(5, b"x"), "round": 3, "stage": 1, "peer_id": "peer", "reward": 0.25}
    with pytest.raises(ProtocolError) as caught:
        codec.decode(msgpack.packb({"v": PROTOCOL_VERSION, "k": "reward", "b": body}))
    assert caught.value.reason in {"malformed", "oversized"}


def test_a_body_may_carry_unknown_keys_up_to_twice_the_largest_schema_to_be_named() -> None:
    # The decoder's map bound leaves room to report an extra key by name; beyond it, oversized.
    largest = max(len(record.fields) for record in (*codec.SCHEMAS.values(), codec.SWARM_SCHEDULE))
    body = {"swarm_id": "swarm", "round": 3, "stage": 1, "peer_id": "peer", "reward": 0.25}

    def reason_with(keys: int) -> str:
        padded = {**body, **{f"x{i}": 0 for i in range(keys - len(body))}}
        with pytest.raises(ProtocolError) as caught:
            codec.decode(msgpack.packb({"v": PROTOCOL_VERSION, "k": "reward", "b": padded}))
        return caught.value.reason

    assert reason_with(2 * largest) == "extra_key"
    assert reason_with(2 * largest + 1) == "oversized"


@given(wire_messages)
def test_every_encoded_message_starts_with_its_kinds_prefix_only(message: WireMessage) -> None:
    data = codec.encode(message)
    for kind in CLASS_OF:
        assert data.startswith(codec.kind_prefix(kind)) == (kind == KIND_OF[type(message)])


def test_an_unknown_kind_has_no_prefix() -> None:
    with pytest.raises(ValueError) as caught:
        codec.kind_prefix("nope")
    assert str(caught.value) == "unknown message kind 'nope'"


def _with(kind: str, **changes: object) -> bytes:
    body = msgpack.unpackb(codec.encode(MESSAGES[kind]), raw=False)["b"]
    body.update(changes)
    return msgpack.packb({"v": PROTOCOL_VERSION, "k": kind, "b": body}, use_bin_type=True)


@pytest.mark.parametrize(
    ("kind", "changes", "expected"),
    [
        ("reward", {"swarm_id": 1}, "bad_type: reward.swarm_id: expected str, got int"),
        ("reward", {"swarm_id": "x" * 65}, "oversized: reward.swarm_id: 65 bytes > 64"),
        ("reward", {"swarm_id": ""}, "out_of_range: reward.swarm_id: 0 bytes < 1"),
        ("reward", {"round": "1"}, "bad_type: reward.round: expected int, got str"),
        ("reward", {"round": -1}, "out_of_range: reward.round: -1 not in [0, 9223372036854775807]"),
        ("reward", {"reward": 1}, "bad_type: reward.reward: expected float, got int"),
        ("reward", {"reward": float("nan")}, "non_finite: reward.reward: nan"),
        ("reward", {"reward": 2.0}, "out_of_range: reward.reward: 2.0 not in [0.0, 1.0]"),
        ("announce", {"batch_digest": "x"}, "bad_type: announce.batch_digest: expected bytes, got str"),
        ("announce", {"batch_digest": b"x" * 33}, "oversized: announce.batch_digest: 33 bytes > 32"),
        ("announce", {"batch_digest": b"x"}, "out_of_range: announce.batch_digest: 1 bytes < 32"),
        ("fetch_resp", {"found": 1}, "bad_type: fetch_resp.found: expected bool, got int"),
        ("winners", {"winners": "x"}, "bad_type: winners.winners: expected array, got str"),
        ("reward", {"x": 1}, "extra_key: reward: unknown key 'x'"),
    ],
)
def test_a_bad_field_is_named_with_what_was_wrong(
    kind: str, changes: dict[str, object], expected: str
) -> None:
    assert error_of(codec.decode, _with(kind, **changes)) == expected


def test_encoding_names_what_cannot_travel() -> None:
    lone = attrs.evolve(REPORT, swarm_id="\ud800")
    assert error_of(codec.encode, lone) == "bad_type: reward.swarm_id: string is not encodable as UTF-8"
    hello = attrs.evolve(MESSAGES["hello"], schedule=QuestionRef("t", 0, 0))
    assert (
        error_of(codec.encode, hello) == "bad_type: hello.schedule: expected SwarmSchedule, got QuestionRef"
    )
    assert error_of(codec.encode, object()) == "unknown_kind: cannot encode object"
    assert error_of(codec.validate, object()) == "unknown_kind: no wire schema for object"
    assert error_of(codec.validate, QuestionRef("", 0, 0)) == "out_of_range: QuestionRef.task: 0 bytes < 1"


# `validate` and a value the compiled fast path steps aside for (an int for a float) run the
# schema interpreter: its bounds must be the same bounds.


def test_the_interpreter_admits_every_bound_exactly() -> None:
    longest_name = "t" * limits.MAX_TASK_NAME_BYTES
    tasks = (longest_name, *(f"t{i}" for i in range(limits.MAX_SCHEDULE_TASKS - 1)))
    codec.validate(schedule(tasks=tasks))
    codec.validate(schedule(weights=(1, 2)))  # ints are weights too: they travel as floats
    codec.validate(Completion(text="", reward=0.0, logprobs=b""))
    codec.validate(Completion(text="", reward=0.0, logprobs=bytes(MAX_LOGPROBS_BYTES)))
    codec.validate(REPORT)  # a top-level message validates as encoding checks it


def test_the_interpreter_names_an_array_past_its_cap_and_its_bad_item() -> None:
    too_many = tuple(f"t{i}" for i in range(limits.MAX_SCHEDULE_TASKS + 1))
    assert (
        error_of(codec.validate, schedule(tasks=too_many))
        == f"oversized: SwarmSchedule.tasks: {len(too_many)} items > {limits.MAX_SCHEDULE_TASKS}"
    )
    assert error_of(codec.validate, schedule(tasks=("a", ""))) == (
        "out_of_range: SwarmSchedule.tasks[1]: 0 bytes < 1"
    )


def test_an_int_reward_is_encoded_as_the_float_it_stands_for() -> None:
    assert codec.encode(attrs.evolve(REPORT, reward=1)) == codec.encode(attrs.evolve(REPORT, reward=1.0))


def test_a_vote_for_the_most_winners_decodes_them_as_a_tuple() -> None:
    vote = WinnersVote(
        swarm_id="swarm", round=3, peer_id="peer", winners=tuple(f"p{i}" for i in range(limits.MAX_WINNERS))
    )
    decoded = codec.decode(codec.encode(vote))
    assert decoded == vote and isinstance(decoded.winners, tuple)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("inner", "reason"),
    [
        (msgpack.packb({1: 2}), "oversized"),  # an int map key is whole msgpack: a real oversize
        (b"\x81\x91\x01\x02", "oversized"),  # {[1]: 2}: an array key is whole msgpack too
        (b"\xa1\xff", "malformed"),  # invalid UTF-8: garbage, whatever its size
    ],
)
def test_an_array_past_the_cap_is_oversized_only_when_it_is_whole_msgpack(inner: bytes, reason: str) -> None:
    data = b"\x91" + inner  # an array of one item, against a cap of none
    with pytest.raises(ProtocolError) as caught:
        codec.unpack_strict(data, max_bin_len=10, max_str_len=10, max_array_len=0, max_map_len=10)
    assert caught.value.reason == reason
