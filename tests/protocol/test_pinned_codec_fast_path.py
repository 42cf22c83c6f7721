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
