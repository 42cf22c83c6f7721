"""protocol/codec.py's compiled fast path: for any value, it either builds exactly what the
schema interpreter builds or steps aside (`_Slow`) for the interpreter to judge; a well-formed
message never steps aside (that is the whole point of compiling). The tables are compiled here,
in the test, rather than read from the module's import-time copies, so a change to the compiler
shows up in these tests."""

from __future__ import annotations

from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.errors import ProtocolError
from protocol.messages import WireMessage
from tests.helpers.strategies import wire_messages
from tests.protocol.vectors.golden_fixtures import MESSAGES

# Values that break some field's type or bound: wrong types, edges of ints and byte lengths,
# multi-byte text at and around the string caps, non-finite floats, containers of any shape.
HOSTILE: list[Any] = [
    None,
    True,
    False,
    -1,
    0,
    1,
    2**63 - 1,
    2**63,
    -0.5,
    0.5,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "x" * 64,
    "x" * 65,
    "x" * 129,
    "é" * 32,
    "é" * 33,
    "\ud800",
    b"",
    b"x",
    b"x" * 32,
    b"x" * 33,
    (),
    ("x",),
    [],
    {},
    {"task": "t"},
    (1.5,) * 65,
]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a decoded body: map values and array items, nested."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    items = list(value)
    items[head] = _replace(items[head], rest, new)
    return tuple(items) if isinstance(value, tuple) else items


def _compiled(message: WireMessage, *, encoding: bool) -> Any:
    return codec._compile_record(codec.SCHEMAS[type(message)], encoding=encoding)


def _interpreted(message: WireMessage, value: Any, *, encoding: bool) -> Any:
    return codec._check_record(codec.SCHEMAS[type(message)], value, "m", encoding=encoding)


def _wire_body(message: WireMessage) -> Any:
    body = _interpreted(message, message, encoding=True)
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False, use_list=False)


@given(wire_messages)
def test_a_well_formed_message_takes_the_fast_path_both_ways(message: WireMessage) -> None:
    body = _compiled(message, encoding=True)(message)
    assert body == _interpreted(message, message, encoding=True)
    wire = _wire_body(message)
    assert _compiled(message, encoding=False)(wire) == message


@given(wire_messages, st.data())
def test_a_hostile_body_is_decoded_as_the_interpreter_decodes_it(
    message: WireMessage, data: st.DataObject
) -> None:
    wire = _wire_body(message)
    path = data.draw(st.sampled_from(_paths(wire)))
    hostile = _replace(wire, path, data.draw(st.sampled_from(HOSTILE)))
    try:
        expected: Any = _interpreted(message, hostile, encoding=False)
    except ProtocolError as error:
        expected = error.reason
    try:
        got: Any = _compiled(message, encoding=False)(hostile)
    except codec._Slow:
        return  # the interpreter judges it: same result by construction
    except ProtocolError as error:  # a cross-field check, run by both
        got = error.reason
    assert got == expected


def _object_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a message object: attributes and tuple items, nested."""
    found = [path] if path else []
    if attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            found += _object_paths(getattr(value, field.name), (*path, field.name))
    elif isinstance(value, tuple):
        for index, item in enumerate(value):
            found += _object_paths(item, (*path, index))
    return found


def _replace_object(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if attrs.has(type(value)):
        return attrs.evolve(value, **{head: _replace_object(getattr(value, head), rest, new)})
    items = list(value)
    items[head] = _replace_object(items[head], rest, new)
    return tuple(items)


@given(wire_messages, st.data())
def test_a_hostile_message_is_encoded_as_the_interpreter_encodes_it(
    message: WireMessage, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(_object_paths(message)))
    hostile = _replace_object(message, path, data.draw(st.sampled_from(HOSTILE)))
    try:
        expected: Any = _interpreted(message, hostile, encoding=True)
    except ProtocolError as error:
        expected = error.reason
    try:
        got: Any = _compiled(message, encoding=True)(hostile)
    except codec._Slow:
        return
    except ProtocolError as error:
        got = error.reason
    assert got == expected


@pytest.mark.parametrize("encoding", [True, False])
def test_a_value_of_another_class_steps_aside(encoding: bool) -> None:
    record = codec.SCHEMAS[next(iter(codec.SCHEMAS))]
    with pytest.raises(codec._Slow):
        codec._compile_record(record, encoding=encoding)(object())


def _edges(spec: Any) -> list[tuple[Any, bool]]:
    """(value, within the spec) at and just past each bound of a leaf spec."""
    if isinstance(spec, codec.Int):
        return [(spec.lo, True), (spec.hi, True), (spec.lo - 1, False), (spec.hi + 1, False)]
    if isinstance(spec, codec.Float):
        return [
            (float(spec.lo), True),
            (float(spec.hi), True),
            (spec.lo - 0.5, False),
            (spec.hi + 0.5, False),
        ]
    if isinstance(spec, codec.Str):
        edges = [("x" * spec.max_bytes, True), ("x" * (spec.max_bytes + 1), False)]
        edges += [("é" * (spec.max_bytes // 2), True), ("é" * (spec.max_bytes // 2 + 1), False)]
        return edges + [("x" * spec.min_bytes, True)] + ([("", False)] if spec.min_bytes else [])
    if isinstance(spec, codec.Bytes):
        # Zero bytes: valid log-probs (0.0) too, so only the length decides.
        edges = [(bytes(spec.min_len), True), (bytes(spec.max_len), True), (bytes(spec.max_len + 1), False)]
        return edges + ([(bytes(spec.min_len - 1), False)] if spec.min_len else [])
    return []


def _leaves(spec: Any, value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, leaf spec) of every scalar position of a wire body."""
    if isinstance(spec, codec.Record):
        found = []
        for name, field_spec in spec.fields.items():
            found += _leaves(field_spec, value[name], (*path, name))
        return found
    if isinstance(spec, codec.Seq):
        return [leaf for index, item in enumerate(value) for leaf in _leaves(spec.item, item, (*path, index))]
    return [(path, spec)]


SAMPLES = list(MESSAGES.values())


@pytest.mark.parametrize("message", SAMPLES, ids=lambda message: type(message).__name__)
def test_every_bound_is_the_fast_paths_bound_too(message: WireMessage) -> None:
    """At each field's bound the fast path accepts (a well-formed message never steps aside);
    one past it, it steps aside for the interpreter to reject."""
    record = codec.SCHEMAS[type(message)]
    wire = _wire_body(message)
    fast = codec._compile_record(record, encoding=False)
    for path, spec in _leaves(record, wire):
        for value, within in _edges(spec):
            body = _replace(wire, path, value)
            try:
                expected: Any = codec._check_record(record, body, "m", encoding=False)
            except ProtocolError as error:
                expected = error.reason
            if within:  # never steps aside; a cross-field check may still refuse, as in the interpreter
                try:
                    got: Any = fast(body)
                except ProtocolError as error:
                    got = error.reason
                assert got == expected, (path, value)
            else:
                assert isinstance(expected, str), (path, value)
                with pytest.raises((codec._Slow, ProtocolError)):
                    fast(body)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda message: type(message).__name__)
def test_every_hostile_value_anywhere_is_judged_as_the_interpreter_judges_it(message: WireMessage) -> None:
    record = codec.SCHEMAS[type(message)]
    wire = _wire_body(message)
    for encoding, base, paths, replace in (
        (False, wire, _paths(wire)[1:], _replace),
        (True, message, _object_paths(message), _replace_object),
    ):
        fast = codec._compile_record(record, encoding=encoding)
        for path in paths:
            for value in HOSTILE:
                hostile = replace(base, path, value)
                try:
                    expected: Any = codec._check_record(record, hostile, "m", encoding=encoding)
                except ProtocolError as error:
                    expected = error.reason
                try:
                    got: Any = fast(hostile)
                except codec._Slow:
                    continue
                except ProtocolError as error:
                    got = error.reason
                assert got == expected, (encoding, path, value)
