"""msgpack encoding and strict decoding of wire messages.

Over 600 lines: the wire schema, its checks and its compiled fast path must change together.

Wire format (version `PROTOCOL_VERSION`):

    top level:  map {"v": PROTOCOL_VERSION, "k": kind, "b": body}      kind: messages.KIND_OF
    body:       map {field name: value} for every field of the attrs class, in field order
    nested:     attrs classes (SwarmSchedule, QuestionRef, Completion, QuestionGroup) are maps
                the same way; tuples are msgpack arrays; str is msgpack str (UTF-8);
                bytes is msgpack bin; floats are float64; ints are msgpack ints.
                (A completion's log-probs are one bin of packed float32s: protocol/logprobs.py.)

Maps keep field names (not compact arrays): a few bytes per field buy self-describing
captures and readable golden vectors, and extra/missing keys are detected by name.

Decoding is strict and total: anything but a well-formed message of a known kind
within every bound in `protocol.limits` raises `ProtocolError` (never another
exception type). msgpack's own length limits are set from those bounds so a hostile
length prefix cannot make the decoder allocate more than the input's size.

Encoding checks the same schema, so a peer never sends what another would reject.
For convenience it accepts an int where a float is expected and a list where a tuple
is expected; decoding always yields floats and tuples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import msgpack

from protocol import limits
from protocol.errors import ProtocolError
from protocol.logprobs import MAX_LOGPROBS_BYTES, logprobs_error
from protocol.messages import (
    CLASS_OF,
    KIND_OF,
    PROTOCOL_VERSION,
    Completion,
    FetchRequest,
    FetchResponse,
    Hello,
    PushedAnnouncement,
    QuestionGroup,
    QuestionRef,
    RewardReport,
    RolloutAnnouncement,
    RolloutBatch,
    SwarmSchedule,
    WinnersVote,
    WireMessage,
)

_BUFFER_TYPES = (bytes, bytearray, memoryview)  # a tuple: `bytes | ...` builds a union per call

# ---- schema ---------------------------------------------------------------------------------


@attrs.frozen
class Str:
    min_bytes: int
    max_bytes: int


@attrs.frozen
class Int:
    lo: int
    hi: int


@attrs.frozen
class Float:
    lo: float
    hi: float


@attrs.frozen
class Bytes:
    min_len: int
    max_len: int


@attrs.frozen
class Bool:
    pass


@attrs.frozen
class Seq:
    item: Spec
    max_items: int


@attrs.frozen
class Record:
    cls: type
    fields: dict[str, Spec]
    # Cross-field rule, run after every field is valid; raises ProtocolError.
    check: Callable[[Any], None] | None = None


Spec = Str | Int | Float | Bytes | Bool | Seq | Record

PEER_ID = Str(1, limits.MAX_PEER_ID_BYTES)
SWARM_ID = Str(1, limits.MAX_SWARM_ID_BYTES)
UINT = Int(0, limits.MAX_UINT63)
ROUND = UINT
STAGE = Int(0, limits.MAX_STAGES - 1)
REWARD = Float(limits.MIN_REWARD, limits.MAX_REWARD)


def _check_fetch_response(message: FetchResponse) -> None:
    # A "not found" answer carrying bytes (or a found one carrying none) is a confused or
    # hostile peer; rejecting it keeps callers from having to guess.
    if message.found != bool(message.envelope):
        raise ProtocolError(
            "inconsistent", "fetch_resp: found must be true exactly when envelope is non-empty"
        )


QUESTION_REF = Record(
    QuestionRef,
    {"task": Str(1, limits.MAX_TASK_NAME_BYTES), "dataset_seed": UINT, "index": UINT},
)


def _check_completion(completion: Completion) -> None:
    # The log-probs' size is already bounded by their Bytes spec; here their values: a NaN or
    # positive log-prob would turn a receiver's importance weight into nonsense.
    error = logprobs_error(completion.logprobs)
    if error is not None:
        raise ProtocolError(*error)


COMPLETION = Record(
    Completion,
    {
        "text": Str(0, limits.MAX_COMPLETION_TEXT_BYTES),
        "reward": REWARD,
        # PROTOCOL_VERSION 3: float32 little-endian per sampled token, empty = none given.
        "logprobs": Bytes(0, MAX_LOGPROBS_BYTES),
    },
    check=_check_completion,
)
QUESTION_GROUP = Record(
    QuestionGroup,
    {"question": QUESTION_REF, "completions": Seq(COMPLETION, limits.MAX_COMPLETIONS_PER_GROUP)},
)


def _check_swarm_rules(schedule: SwarmSchedule) -> None:
    # The rules must describe one usable task mix: peers derive questions by indexing into
    # `tasks` (by weight), so duplicates, a weight per nothing, or all-zero weights would make
    # two honest peers disagree (or fail) on which questions a peer had to answer.
    if not schedule.tasks:
        raise ProtocolError("out_of_range", "schedule: tasks must name at least one task")
    if len(set(schedule.tasks)) != len(schedule.tasks):
        raise ProtocolError("inconsistent", "schedule: tasks has duplicates")
    if schedule.weights:
        if len(schedule.weights) != len(schedule.tasks):
            raise ProtocolError(
                "inconsistent",
                f"schedule: {len(schedule.weights)} weights for {len(schedule.tasks)} tasks",
            )
        if not sum(schedule.weights) > 0:
            raise ProtocolError("inconsistent", "schedule: weights must have a positive sum")


SWARM_SCHEDULE = Record(
    SwarmSchedule,
    {
        "swarm_id": SWARM_ID,
        "genesis_ms": UINT,
        "round_ms": Int(limits.MIN_ROUND_MS, limits.MAX_UINT63),
        "stage_count": Int(1, limits.MAX_STAGES),
        "seed": UINT,
        # The swarm's scoring rules (PROTOCOL_VERSION 2): at least one task, no task without a name.
        "tasks": Seq(Str(1, limits.MAX_TASK_NAME_BYTES), limits.MAX_SCHEDULE_TASKS),
        "weights": Seq(Float(0.0, limits.MAX_TASK_WEIGHT), limits.MAX_SCHEDULE_TASKS),
        "questions_per_round": Int(1, limits.MAX_GROUPS_PER_BATCH),
        "format_reward": REWARD,
        "difficulty": Int(limits.MIN_DIFFICULTY, limits.MAX_DIFFICULTY),
        # The swarm's game by name (PROTOCOL_VERSION 4); a peer that lacks it refuses to join.
        "game": Str(1, limits.MAX_GAME_NAME_BYTES),
    },
    check=_check_swarm_rules,
)

SCHEMAS: dict[type, Record] = {
    Hello: Record(
        Hello,
        {
            "protocol_version": UINT,
            "peer_id": PEER_ID,
            "schedule": SWARM_SCHEDULE,
            "current_round": Int(-1, limits.MAX_UINT63),  # -1: not in any round yet
            "listen_addrs": Seq(Str(1, limits.MAX_LISTEN_ADDR_BYTES), limits.MAX_LISTEN_ADDRS),
            "model": Str(0, limits.MAX_MODEL_NAME_BYTES),
        },
    ),
    RolloutAnnouncement: Record(
        RolloutAnnouncement,
        {
            "swarm_id": SWARM_ID,
            "round": ROUND,
            "stage": STAGE,
            "peer_id": PEER_ID,
            "batch_digest": Bytes(limits.DIGEST_BYTES, limits.DIGEST_BYTES),
            "group_count": Int(0, limits.MAX_GROUPS_PER_BATCH),
            "size_bytes": Int(0, limits.MAX_ENVELOPE_BYTES),
        },
    ),
    RolloutBatch: Record(
        RolloutBatch,
        {
            "swarm_id": SWARM_ID,
            "round": ROUND,
            "stage": STAGE,
            "peer_id": PEER_ID,
            "groups": Seq(QUESTION_GROUP, limits.MAX_GROUPS_PER_BATCH),
        },
    ),
    FetchRequest: Record(
        FetchRequest, {"swarm_id": SWARM_ID, "round": ROUND, "stage": STAGE, "peer_id": PEER_ID}
    ),
    FetchResponse: Record(
        FetchResponse,
        {"found": Bool(), "envelope": Bytes(0, limits.MAX_ENVELOPE_BYTES)},
        check=_check_fetch_response,
    ),
    PushedAnnouncement: Record(
        PushedAnnouncement,
        {
            "announcement": Bytes(1, limits.MAX_SEALED_ANNOUNCE_BYTES),
            "envelope": Bytes(1, limits.MAX_PUSHED_ENVELOPE_BYTES),
        },
    ),
    RewardReport: Record(
        RewardReport,
        {"swarm_id": SWARM_ID, "round": ROUND, "stage": STAGE, "peer_id": PEER_ID, "reward": REWARD},
    ),
    WinnersVote: Record(
        WinnersVote,
        {
            "swarm_id": SWARM_ID,
            "round": ROUND,
            "peer_id": PEER_ID,
            "winners": Seq(PEER_ID, limits.MAX_WINNERS),
        },
    ),
}
"""Schema of every top-level message. A test checks these match the attrs fields exactly."""

# ---- validation (shared by encode and decode) -----------------------------------------------


def _check(spec: Spec, value: Any, where: str, *, encoding: bool) -> Any:
    """Validate `value` against `spec`; return the Python value (decode) or msgpack-ready value (encode)."""
    if isinstance(spec, Str):
        if not isinstance(value, str):
            raise ProtocolError("bad_type", f"{where}: expected str, got {type(value).__name__}")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ProtocolError("bad_type", f"{where}: string is not encodable as UTF-8") from None
        if size > spec.max_bytes:
            raise ProtocolError("oversized", f"{where}: {size} bytes > {spec.max_bytes}")
        if size < spec.min_bytes:
            raise ProtocolError("out_of_range", f"{where}: {size} bytes < {spec.min_bytes}")
        return value
    if isinstance(spec, Int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError("bad_type", f"{where}: expected int, got {type(value).__name__}")
        if not spec.lo <= value <= spec.hi:
            raise ProtocolError("out_of_range", f"{where}: {value} not in [{spec.lo}, {spec.hi}]")
        return value
    if isinstance(spec, Float):
        if encoding and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, float):
            raise ProtocolError("bad_type", f"{where}: expected float, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ProtocolError("non_finite", f"{where}: {value}")
        if not spec.lo <= value <= spec.hi:
            raise ProtocolError("out_of_range", f"{where}: {value} not in [{spec.lo}, {spec.hi}]")
        return value
    if isinstance(spec, Bytes):
        if not isinstance(value, bytes):
            raise ProtocolError("bad_type", f"{where}: expected bytes, got {type(value).__name__}")
        if len(value) > spec.max_len:
            raise ProtocolError("oversized", f"{where}: {len(value)} bytes > {spec.max_len}")
        if len(value) < spec.min_len:
            raise ProtocolError("out_of_range", f"{where}: {len(value)} bytes < {spec.min_len}")
        return value
    if isinstance(spec, Bool):
        if not isinstance(value, bool):
            raise ProtocolError("bad_type", f"{where}: expected bool, got {type(value).__name__}")
        return value
    if isinstance(spec, Seq):
        if not (isinstance(value, tuple) or (encoding and isinstance(value, list))):
            raise ProtocolError("bad_type", f"{where}: expected array, got {type(value).__name__}")
        if len(value) > spec.max_items:
            raise ProtocolError("oversized", f"{where}: {len(value)} items > {spec.max_items}")
        items = [_check(spec.item, item, f"{where}[{i}]", encoding=encoding) for i, item in enumerate(value)]
        return items if encoding else tuple(items)
    return _check_record(spec, value, where, encoding=encoding)


def _check_record(spec: Record, value: Any, where: str, *, encoding: bool) -> Any:
    if encoding:
        if type(value) is not spec.cls:
            raise ProtocolError(
                "bad_type", f"{where}: expected {spec.cls.__name__}, got {type(value).__name__}"
            )
        out = {}
        for name, field_spec in spec.fields.items():
            out[name] = _check(field_spec, getattr(value, name), f"{where}.{name}", encoding=True)
        if spec.check is not None:
            spec.check(value)
        return out
    if not isinstance(value, dict):
        raise ProtocolError("bad_type", f"{where}: expected map, got {type(value).__name__}")
    for key in value:
        if key not in spec.fields:
            raise ProtocolError("extra_key", f"{where}: unknown key {key!r}")
    kwargs = {}
    for name, field_spec in spec.fields.items():
        if name not in value:
            raise ProtocolError("missing_key", f"{where}: missing {name!r}")
        kwargs[name] = _check(field_spec, value[name], f"{where}.{name}", encoding=False)
    result = spec.cls(**kwargs)
    if spec.check is not None:
        spec.check(result)
    return result


# ---- compiled fast path ----------------------------------------------------------------------
#
# `_check` interprets the schema: an isinstance chain per value, an f-string path per field.
# Every node of a busy swarm decodes every batch it verifies, so each schema is also compiled
# once into nested closures that accept exactly the well-formed values and build the same
# result. They never report errors themselves: on the first value that is not plainly valid
# they raise `_Slow`, and the interpreter above runs from the top to produce the exact
# ProtocolError (reason and message) it always has. Valid input: same result, faster;
# invalid input: same error, slightly later.


class _Slow(Exception):
    """The fast path met something it does not accept outright; the interpreter decides."""


def _compile(spec: Spec, *, encoding: bool) -> Callable[[Any], Any]:
    if isinstance(spec, Str):
        lo, hi = spec.min_bytes, spec.max_bytes

        def check_str(value: Any) -> Any:
            if type(value) is not str:
                raise _Slow
            if value.isascii():
                size = len(value)
            else:
                try:
                    size = len(value.encode("utf-8"))
                except UnicodeEncodeError:  # a lone surrogate: the interpreter's bad_type
                    raise _Slow from None
            if not lo <= size <= hi:
                raise _Slow
            return value

        return check_str
    if isinstance(spec, Int):
        ilo, ihi = spec.lo, spec.hi

        def check_int(value: Any) -> Any:
            if type(value) is not int or not ilo <= value <= ihi:
                raise _Slow
            return value

        return check_int
    if isinstance(spec, Float):
        flo, fhi = spec.lo, spec.hi
        isfinite = math.isfinite

        def check_float(value: Any) -> Any:
            if type(value) is not float:
                if encoding and type(value) is int:
                    value = float(value)
                else:
                    raise _Slow
            if not isfinite(value) or not flo <= value <= fhi:
                raise _Slow
            return value

        return check_float
    if isinstance(spec, Bytes):
        blo, bhi = spec.min_len, spec.max_len

        def check_bytes(value: Any) -> Any:
            if type(value) is not bytes or not blo <= len(value) <= bhi:
                raise _Slow
            return value

        return check_bytes
    if isinstance(spec, Bool):

        def check_bool(value: Any) -> Any:
            if type(value) is not bool:
                raise _Slow
            return value

        return check_bool
    if isinstance(spec, Seq):
        item = _compile(spec.item, encoding=encoding)
        max_items = spec.max_items
        containers = (tuple, list) if encoding else (tuple,)

        def check_seq(value: Any) -> Any:
            if type(value) not in containers or len(value) > max_items:
                raise _Slow
            items = [item(element) for element in value]
            return items if encoding else tuple(items)

        return check_seq
    return _compile_record(spec, encoding=encoding)


def _compile_record(spec: Record, *, encoding: bool) -> Callable[[Any], Any]:
    fields = tuple(
        (name, _compile(field_spec, encoding=encoding)) for name, field_spec in spec.fields.items()
    )
    names = frozenset(spec.fields)
    cls, cross_check = spec.cls, spec.check

    if encoding:

        def encode_record(value: Any) -> Any:
            if type(value) is not cls:
                raise _Slow
            out = {name: check(getattr(value, name)) for name, check in fields}
            if cross_check is not None:
                cross_check(value)
            return out

        return encode_record

    def decode_record(value: Any) -> Any:
        if type(value) is not dict or value.keys() != names:
            raise _Slow
        result = cls(**{name: check(value[name]) for name, check in fields})
        if cross_check is not None:
            cross_check(result)
        return result

    return decode_record


_FAST_ENCODE = {cls: _compile_record(record, encoding=True) for cls, record in SCHEMAS.items()}
_FAST_DECODE = {cls: _compile_record(record, encoding=False) for cls, record in SCHEMAS.items()}


# ---- msgpack framing ------------------------------------------------------------------------


def _unique_keys_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # msgpack would silently keep the last of duplicate keys; two decoders could then
    # disagree on what a signed message says, so duplicates are malformed.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ProtocolError("malformed", "duplicate map key")
    return result


def unpack_strict(
    data: bytes, *, max_bin_len: int, max_str_len: int, max_array_len: int, max_map_len: int
) -> Any:
    """msgpack-decode one object with hostile-input limits; any failure is a ProtocolError."""
    if not isinstance(data, _BUFFER_TYPES):
        raise ProtocolError("bad_type", f"expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=False,
            strict_map_key=True,
            object_pairs_hook=_unique_keys_map,
            max_bin_len=max_bin_len,
            max_str_len=max_str_len,
            max_array_len=max_array_len,
            max_map_len=max_map_len,
            max_ext_len=0,  # no extension types (timestamps included) anywhere in the protocol
        )
    except ProtocolError:
        raise
    except msgpack.ExtraData:
        raise ProtocolError("malformed", "trailing bytes after the message") from None
    except UnicodeDecodeError:
        raise ProtocolError("malformed", "string is not valid UTF-8") from None
    except ValueError as error:
        text = str(error)
        if "exceeds max" in text and _is_complete_msgpack(data):
            raise ProtocolError("oversized", f"msgpack length {text}") from None
        raise ProtocolError("malformed", f"invalid msgpack: {text}") from None
    except Exception as error:
        raise ProtocolError("malformed", f"invalid msgpack: {type(error).__name__}") from None


def _is_complete_msgpack(data: bytes) -> bool:
    """Whether `data` is one whole msgpack object. msgpack checks a length header against the
    max_*_len bounds before it reads what follows, so "exceeds max" alone does not tell a
    message that really holds too many items from garbage whose header claims billions: only
    the former is `oversized`. msgpack's default bounds are the input's own length, so this
    second pass allocates no more than the input."""
    try:
        msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
    except Exception:
        return False
    return True


_TOP_KEYS = frozenset({"v", "k", "b"})
_MAX_MAP_KEYS = max(len(record.fields) for record in (*SCHEMAS.values(), SWARM_SCHEDULE))
_MAX_ARRAY_ITEMS = max(
    limits.MAX_GROUPS_PER_BATCH,
    limits.MAX_COMPLETIONS_PER_GROUP,
    limits.MAX_WINNERS,
    limits.MAX_LISTEN_ADDRS,
    limits.MAX_SCHEDULE_TASKS,
)
_MAX_STR_BYTES = limits.MAX_COMPLETION_TEXT_BYTES


NESTED_SCHEMAS: dict[type, Record] = {
    record.cls: record for record in (SWARM_SCHEDULE, QUESTION_REF, COMPLETION, QUESTION_GROUP)
}
"""Schemas of the records that travel inside messages; `validate` checks one on its own."""


def validate(value: Any) -> None:
    """Check a message or nested record (e.g. a SwarmSchedule read from a file) against the
    wire schema, exactly as encoding would. Raises ProtocolError (and only that)."""
    record = SCHEMAS.get(type(value)) or NESTED_SCHEMAS.get(type(value))
    if record is None:
        raise ProtocolError("unknown_kind", f"no wire schema for {type(value).__name__}")
    _check_record(record, value, type(value).__name__, encoding=True)


def encode(message: WireMessage) -> bytes:
    """Encode a message to its wire bytes. Raises ProtocolError if it breaks any bound."""
    kind = KIND_OF.get(type(message))
    if kind is None:
        raise ProtocolError("unknown_kind", f"cannot encode {type(message).__name__}")
    try:
        body = _FAST_ENCODE[type(message)](message)
    except _Slow:
        body = _check_record(SCHEMAS[type(message)], message, kind, encoding=True)
    try:
        data = msgpack.packb({"v": PROTOCOL_VERSION, "k": kind, "b": body}, use_bin_type=True)
    except Exception as error:  # e.g. a str subclass msgpack refuses
        raise ProtocolError("bad_type", f"{kind}: cannot pack: {type(error).__name__}") from None
    cap = limits.MAX_MESSAGE_BYTES[kind]
    if len(data) > cap:
        raise ProtocolError("oversized", f"{kind}: {len(data)} bytes > {cap}")
    return data


def kind_prefix(kind: str) -> bytes:
    """The first bytes of every encoded message of `kind` (`encode` writes "v", "k", "b" in
    that order): a receiver that handles two kinds on one topic tells them apart with one
    `startswith` before it decodes anything. A match is no proof: `decode` still judges it."""
    if kind not in CLASS_OF:
        raise ValueError(f"unknown message kind {kind!r}")
    head = msgpack.packb("v") + msgpack.packb(PROTOCOL_VERSION) + msgpack.packb("k") + msgpack.packb(kind)
    return b"\x83" + head  # a map of three keys


def decode(data: bytes) -> WireMessage:
    """Decode wire bytes to a message. Raises ProtocolError (and only that) on any bad input."""
    if not isinstance(data, _BUFFER_TYPES):
        raise ProtocolError("bad_type", f"expected bytes, got {type(data).__name__}")
    size = len(data)
    if size > limits.MAX_ANY_MESSAGE_BYTES:
        raise ProtocolError("oversized", f"message: {size} bytes > {limits.MAX_ANY_MESSAGE_BYTES}")
    top = unpack_strict(
        bytes(data),
        max_bin_len=limits.MAX_ENVELOPE_BYTES,
        max_str_len=_MAX_STR_BYTES,
        max_array_len=_MAX_ARRAY_ITEMS,
        max_map_len=2 * _MAX_MAP_KEYS,  # room to report an extra key by name
    )
    if not isinstance(top, dict):
        raise ProtocolError("bad_type", f"message: expected map, got {type(top).__name__}")
    for key in top:
        if key not in _TOP_KEYS:
            raise ProtocolError("extra_key", f"message: unknown key {key!r}")
    for key in ("v", "k", "b"):
        if key not in top:
            raise ProtocolError("missing_key", f"message: missing {key!r}")
    version = top["v"]
    if isinstance(version, bool) or not isinstance(version, int) or version != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", f"message: version {version!r}, expected {PROTOCOL_VERSION}")
    kind = top["k"]
    if not isinstance(kind, str) or kind not in CLASS_OF:
        raise ProtocolError("unknown_kind", f"message: kind {kind!r}")
    cap = limits.MAX_MESSAGE_BYTES[kind]
    if size > cap:
        raise ProtocolError("oversized", f"{kind}: {size} bytes > {cap}")
    cls = CLASS_OF[kind]
    try:
        return _FAST_DECODE[cls](top["b"])
    except _Slow:
        return _check_record(SCHEMAS[cls], top["b"], kind, encoding=False)
