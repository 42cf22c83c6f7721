"""Codec: exact round-trips for every kind, strict rejection of everything else."""

from __future__ import annotations

import math

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec, limits
from protocol.errors import ProtocolError
from protocol.messages import (
    CLASS_OF,
    KIND_OF,
    PROTOCOL_VERSION,
    Completion,
    FetchRequest,
    FetchResponse,
    Hello,
    QuestionGroup,
    QuestionRef,
    RewardReport,
    RolloutAnnouncement,
    RolloutBatch,
    SwarmSchedule,
    WinnersVote,
)
from tests.helpers.strategies import STRATEGY_OF_KIND, wire_messages

REPORT = RewardReport(swarm_id="swarm", round=3, stage=1, peer_id="peer", reward=0.25)


def raw(top: dict) -> bytes:
    return msgpack.packb(top, use_bin_type=True)


def report_body(**changes) -> dict:
    body = {"swarm_id": "swarm", "round": 3, "stage": 1, "peer_id": "peer", "reward": 0.25}
    body.update(changes)
    return body


def reason_of(data: bytes) -> str:
    with pytest.raises(ProtocolError) as caught:
        codec.decode(data)
    return caught.value.reason


# ---- round trips -------------------------------------------------------------------------


def test_every_message_class_has_a_schema_matching_its_fields():
    assert set(codec.SCHEMAS) == set(KIND_OF)
    assert set(STRATEGY_OF_KIND) == set(CLASS_OF)

    def check(record: codec.Record) -> None:
        assert list(record.fields) == [field.name for field in attrs.fields(record.cls)], record.cls
        for spec in record.fields.values():
            while isinstance(spec, codec.Seq):
                spec = spec.item
            if isinstance(spec, codec.Record):
                check(spec)

    for record in codec.SCHEMAS.values():
        check(record)


@pytest.mark.parametrize("kind", sorted(STRATEGY_OF_KIND))
@given(data=st.data())
def test_round_trip_every_kind(kind, data):
    message = data.draw(STRATEGY_OF_KIND[kind])
    encoded = codec.encode(message)
    assert len(encoded) <= limits.MAX_MESSAGE_BYTES[kind]
    decoded = codec.decode(encoded)
    assert decoded == message
    assert type(decoded) is type(message)
    assert codec.encode(decoded) == encoded  # canonical: one message, one encoding


def test_encode_accepts_int_reward_and_list_tuples_but_decodes_canonically():
    message = WinnersVote(swarm_id="s", round=1, peer_id="p", winners=["a", "b"])  # type: ignore[arg-type]
    decoded = codec.decode(codec.encode(message))
    assert decoded.winners == ("a", "b")
    report = codec.decode(codec.encode(attrs.evolve(REPORT, reward=1)))
    assert isinstance(report.reward, float) and report.reward == 1.0


# ---- strict rejection: hand-made cases -----------------------------------------------------


def test_well_formed_raw_report_decodes():
    assert codec.decode(raw({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body()})) == REPORT


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (report_body(round=True), "bad_type"),  # bool is not int
        (report_body(round=3.0), "bad_type"),
        (report_body(reward=1), "bad_type"),  # int is not float on the wire
        (report_body(peer_id=b"peer"), "bad_type"),  # bytes is not str
        (report_body(round=-1), "out_of_range"),
        (report_body(round=2**64 - 1), "out_of_range"),
        (report_body(stage=limits.MAX_STAGES), "out_of_range"),
        (report_body(reward=1.5), "out_of_range"),
        (report_body(reward=-0.1), "out_of_range"),
        (report_body(reward=math.nan), "non_finite"),
        (report_body(reward=math.inf), "non_finite"),
        (report_body(peer_id=""), "out_of_range"),
        (report_body(peer_id="x" * (limits.MAX_PEER_ID_BYTES + 1)), "oversized"),
        (report_body(peer_id="é" * (limits.MAX_PEER_ID_BYTES // 2 + 1)), "oversized"),  # bytes, not chars
        (report_body(extra=1), "extra_key"),
        ({k: v for k, v in report_body().items() if k != "stage"}, "missing_key"),
        ([1, 2, 3], "bad_type"),
    ],
)
def test_bad_report_bodies_are_rejected_with_their_reason(body, reason):
    assert reason_of(raw({"v": PROTOCOL_VERSION, "k": "reward", "b": body})) == reason


@pytest.mark.parametrize(
    ("top", "reason"),
    [
        ({"v": PROTOCOL_VERSION + 1, "k": "reward", "b": report_body()}, "bad_version"),
        ({"v": True, "k": "reward", "b": report_body()}, "bad_version"),
        ({"v": PROTOCOL_VERSION, "k": "nope", "b": report_body()}, "unknown_kind"),
        ({"v": PROTOCOL_VERSION, "k": b"reward", "b": report_body()}, "unknown_kind"),
        ({"v": PROTOCOL_VERSION, "k": "reward"}, "missing_key"),
        ({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body(), "x": 0}, "extra_key"),
    ],
)
def test_bad_frames_are_rejected_with_their_reason(top, reason):
    assert reason_of(raw(top)) == reason


def test_trailing_bytes_truncation_and_garbage_are_malformed():
    good = codec.encode(REPORT)
    assert reason_of(good + b"\x00") == "malformed"
    assert reason_of(good[:-1]) == "malformed"
    assert reason_of(b"") == "malformed"
    assert reason_of(b"\xc1") == "malformed"  # the one byte msgpack never uses


def test_extension_types_and_timestamps_are_rejected():
    ext = raw({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body(peer_id=msgpack.ExtType(5, b"xx"))})
    timestamp = raw({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body(round=msgpack.Timestamp(1, 0))})
    assert reason_of(ext) in {"malformed", "oversized"}
    assert reason_of(timestamp) in {"malformed", "oversized"}


def test_duplicate_map_keys_are_malformed():
    # Hand-built map with "round" twice: a lenient decoder would keep the last one.
    body = msgpack.packb(report_body())
    assert body[0] == 0x85
    duplicate = bytes([0x86]) + body[1:] + msgpack.packb("round") + msgpack.packb(4)
    top = raw({"v": PROTOCOL_VERSION, "k": "reward"})
    data = bytes([top[0] + 1]) + top[1:] + msgpack.packb("b") + duplicate
    assert reason_of(data) == "malformed"


def test_invalid_utf8_is_malformed():
    top = raw({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body(peer_id="@@@@")})
    assert reason_of(top.replace(b"@@@@", b"\xff\xfe\xfd\xfc")) == "malformed"


def test_hostile_length_prefix_does_not_allocate_and_is_malformed():
    # bin32 / str32 / array32 / map32 headers claiming ~4 GiB with almost no payload: a header
    # promising more than the message holds is garbage, not a message that is too big.
    for header in (
        b"\xc6\xff\xff\xff\xf0",
        b"\xdb\xff\xff\xff\xf0",
        b"\xdd\xff\xff\xff\xf0",
        b"\xdf\xff\xff\xff\xf0",
        b"\xde\x01\x00",  # map16 of 256 pairs, then nothing
    ):
        assert reason_of(header + b"\x00" * 16) == "malformed"


def test_a_complete_message_with_too_many_items_is_still_oversized():
    # Well-formed msgpack whose map or list is over the decoder's bound: really too big.
    many_keys = raw({f"k{i}": i for i in range(100)})
    assert reason_of(many_keys) == "oversized"
    long_list = raw({"v": PROTOCOL_VERSION, "k": "reward", "b": list(range(1000))})
    assert reason_of(long_list) == "oversized"


def well_formed_msgpack(data: bytes) -> bool:
    """Complete msgpack (one object, nothing after it), whatever its sizes and shape."""
    try:
        msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return False
    return True


# Random bytes that start like a container or string more often than uniform bytes would.
_LENGTH_HEADERS = [*range(0x80, 0xC0), 0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF]
garbage = st.one_of(
    st.binary(max_size=512),
    st.builds(
        lambda head, rest: bytes([head]) + rest, st.sampled_from(_LENGTH_HEADERS), st.binary(max_size=64)
    ),
    st.builds(lambda n, rest: codec.encode(REPORT)[:n] + rest, st.integers(0, 60), st.binary(max_size=64)),
)


@given(garbage)
def test_garbage_is_malformed_never_oversized(data):
    """`oversized` means a message really is too big: over its byte cap, or well-formed
    msgpack holding more than a bound allows. Bytes that are not msgpack at all are
    `malformed`, whatever length a header in them claims."""
    try:
        codec.decode(data)
    except ProtocolError as error:
        if error.reason == "oversized":
            assert len(data) > limits.MAX_ANY_MESSAGE_BYTES or well_formed_msgpack(data), (error, data)


def test_over_cap_messages_are_oversized_before_parsing():
    assert reason_of(b"\x00" * (limits.MAX_ANY_MESSAGE_BYTES + 1)) == "oversized"
    # A reward report padded to just over its per-kind cap with a long, otherwise valid field.
    padded = raw({"v": PROTOCOL_VERSION, "k": "reward", "b": report_body(swarm_id="s" * 2000)})
    assert reason_of(padded) == "oversized"


def test_deep_nesting_is_rejected():
    nested = b"\x91" * 100_000 + b"\x00"
    assert reason_of(nested) in {"malformed", "bad_type", "oversized"}


def test_fetch_response_found_flag_must_match_payload():
    for bad in (FetchResponse(found=True, envelope=b""), FetchResponse(found=False, envelope=b"x")):
        with pytest.raises(ProtocolError) as caught:
            codec.encode(bad)
        assert caught.value.reason == "inconsistent"
    body = {"found": False, "envelope": b"x"}
    assert reason_of(raw({"v": PROTOCOL_VERSION, "k": "fetch_resp", "b": body})) == "inconsistent"


def test_encode_refuses_what_decode_would_reject():
    question = QuestionRef("t", 1, 2)
    too_long = Completion("x" * (limits.MAX_COMPLETION_TEXT_BYTES + 1), 0.5)
    bad = [
        attrs.evolve(REPORT, reward=math.nan),
        attrs.evolve(REPORT, round=-1),
        attrs.evolve(REPORT, round=True),
        attrs.evolve(REPORT, peer_id="\ud800"),  # lone surrogate: not encodable as UTF-8
        RolloutBatch("s", 0, 0, "p", (QuestionGroup(question, (too_long,)),)),
        RolloutBatch("s", 0, 0, "p", (QuestionGroup(question, ()),) * (limits.MAX_GROUPS_PER_BATCH + 1)),
        "not a message",
    ]
    for message in bad:
        with pytest.raises(ProtocolError):
            codec.encode(message)  # type: ignore[arg-type]


def test_batch_over_its_total_cap_is_refused_on_encode():
    text = "x" * limits.MAX_COMPLETION_TEXT_BYTES
    group = QuestionGroup(QuestionRef("t", 1, 2), tuple(Completion(text, 0.0) for _ in range(64)))
    batch = RolloutBatch(
        "s", 0, 0, "p", tuple(attrs.evolve(group, question=QuestionRef("t", 1, i)) for i in range(8))
    )
    with pytest.raises(ProtocolError) as caught:
        codec.encode(batch)
    assert caught.value.reason == "oversized"


def test_non_bytes_input_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        codec.decode("text")  # type: ignore[arg-type]


# ---- fuzz: only ProtocolError, ever ----------------------------------------------------------


def decode_or_protocol_error(data: bytes) -> None:
    try:
        message = codec.decode(data)
    except ProtocolError as error:
        assert error.reason and "\n" not in str(error)
    else:
        assert codec.decode(codec.encode(message)) == message  # anything accepted is valid


@given(st.binary(max_size=512))
def test_random_bytes_raise_only_protocol_error(data):
    decode_or_protocol_error(data)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=8)
        | st.binary(max_size=8),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    ),
    st.sampled_from(sorted(CLASS_OF)),
)
def test_random_msgpack_bodies_raise_only_protocol_error(body, kind):
    decode_or_protocol_error(raw({"v": PROTOCOL_VERSION, "k": kind, "b": body}))


@st.composite
def mutated_encodings(draw):
    data = bytearray(codec.encode(draw(wire_messages)))
    for _ in range(draw(st.integers(1, 4))):
        operation = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "replace"]))
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        if operation == "flip" and data:
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif operation == "truncate":
            del data[position:]
        elif operation == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif operation == "delete" and data:
            del data[position : position + draw(st.integers(1, 8))]
        elif operation == "replace" and data:
            data[position] = draw(st.integers(0, 255))
    return bytes(data)


@given(mutated_encodings())
def test_mutated_encodings_raise_only_protocol_error(data):
    decode_or_protocol_error(data)


@st.composite
def key_changed_encodings(draw):
    """A valid message whose body gains, loses or renames a key, or has a value swapped."""
    message = draw(wire_messages)
    kind = KIND_OF[type(message)]
    body = msgpack.unpackb(codec.encode(message), raw=False)["b"]
    names = sorted(body)
    operation = draw(st.sampled_from(["drop", "add", "rename", "retype"]))
    name = draw(st.sampled_from(names))
    if operation == "drop":
        del body[name]
    elif operation == "add":
        body[draw(st.text(min_size=1, max_size=8).filter(lambda key: key not in body))] = 0
    elif operation == "rename":
        body[name + "_"] = body.pop(name)
    else:
        body[name] = draw(st.sampled_from([None, True, "x", b"x", 1.5, -1, [], {}]))
    return raw({"v": PROTOCOL_VERSION, "k": kind, "b": body}), operation


@given(key_changed_encodings())
def test_key_changes_are_rejected_or_still_valid(case):
    data, operation = case
    if operation in ("drop", "add", "rename"):
        with pytest.raises(ProtocolError):
            codec.decode(data)
    else:
        decode_or_protocol_error(data)


def test_every_small_kind_fits_its_cap_even_with_every_field_at_its_maximum():
    # Only a batch (and the fetch response carrying one) can outgrow its cap field by field;
    # every gossip-sized kind must always fit, or valid messages would be unsendable.
    peer = "p" * limits.MAX_PEER_ID_BYTES
    swarm = "s" * limits.MAX_SWARM_ID_BYTES
    big = limits.MAX_UINT63
    # The swarm's rules at their caps too: the most tasks, each name at its longest, a weight each.
    tasks = tuple(f"{i:03d}".ljust(limits.MAX_TASK_NAME_BYTES, "t") for i in range(limits.MAX_SCHEDULE_TASKS))
    schedule = SwarmSchedule(
        swarm,
        big,
        big,
        limits.MAX_STAGES,
        big,
        tasks=tasks,
        weights=(limits.MAX_TASK_WEIGHT / 3,) * len(tasks),
        questions_per_round=limits.MAX_GROUPS_PER_BATCH,
        format_reward=1 / 3,
        difficulty=limits.MAX_DIFFICULTY,
    )
    stage = limits.MAX_STAGES - 1
    largest = [
        Hello(
            big,
            peer,
            schedule,
            big,
            ("a" * limits.MAX_LISTEN_ADDR_BYTES,) * limits.MAX_LISTEN_ADDRS,
            "m" * 128,
        ),
        RolloutAnnouncement(
            swarm, big, stage, peer, b"d" * 32, limits.MAX_GROUPS_PER_BATCH, limits.MAX_ENVELOPE_BYTES
        ),
        FetchRequest(swarm, big, stage, peer),
        FetchResponse(True, b"e" * limits.MAX_ENVELOPE_BYTES),
        RewardReport(swarm, big, stage, peer, 1.0),
        WinnersVote(swarm, big, peer, (peer,) * limits.MAX_WINNERS),
    ]
    for message in largest:
        assert codec.decode(codec.encode(message)) == message
