"""protocol/codec.py: the line a node logs for each rejected message names what was wrong (a
peer's operator reads it to find the bug in their peer), so the cross-field rules' and the
framing errors' texts are pinned whole, with their counter keys."""

from __future__ import annotations

import msgpack
import pytest

from protocol import codec
from protocol.errors import ProtocolError
from protocol.messages import PROTOCOL_VERSION, FetchResponse, RewardReport, SwarmSchedule

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
