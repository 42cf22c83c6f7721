"""SenderMap (and SenderRounds, its array of round numbers) behaves as a dict of peer id ->
value, whatever the numbering's state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import DictMaps
from protocol.sender_map import PeerNumbers, SenderMap, SenderRounds

PEERS = [f"peer{i}" for i in range(8)]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(PEERS), st.integers(0, 5)),
        st.tuples(st.just("del"), st.sampled_from(PEERS), st.none()),
        st.tuples(st.just("drop_below"), st.none(), st.integers(0, 6)),
        st.tuples(st.just("number"), st.sampled_from(PEERS), st.none()),  # another map numbers it
        st.tuples(st.just("clear"), st.none(), st.none()),
    ),
    max_size=40,
)


@pytest.mark.parametrize("kind", [SenderMap, SenderRounds])
@given(prenumbered=st.lists(st.sampled_from(PEERS), unique=True), ops=operations)
def test_a_sender_map_is_a_dict(
    kind: type[SenderMap[int]], prenumbered: list[str], ops: list[tuple[str, str | None, int | None]]
) -> None:
    numbers = PeerNumbers(prenumbered)
    mapped: SenderMap[int] = kind(numbers)
    model: dict[str, int] = {}
    for op, peer, value in ops:
        if op == "set":
            assert peer is not None and value is not None
            mapped[peer] = value
            model[peer] = value
        elif op == "del":
            assert peer is not None
            if peer in model:
                del mapped[peer]
                del model[peer]
            else:
                with pytest.raises(KeyError):
                    del mapped[peer]
        elif op == "drop_below":
            assert value is not None
            mapped.drop_below(value)
            model = {p: v for p, v in model.items() if v >= value}
        elif op == "clear":
            mapped.clear()
            model.clear()
        else:
            assert peer is not None
            numbers.of(peer)
        assert dict(mapped) == model and len(mapped) == len(model) and set(mapped) == set(model)
        for p in PEERS:
            assert (p in mapped) == (p in model)
            assert mapped.get(p) == model.get(p) and mapped.get(p, -1) == model.get(p, -1)
    assert mapped == model and model == mapped


def test_maps_share_one_numbering_and_keep_their_own_values() -> None:
    numbers = PeerNumbers(["a", "b"])
    first: SenderMap[bytes] = SenderMap(numbers)
    second: SenderMap[bytes] = SenderMap(numbers)
    first["c"] = b"1"  # numbered now, after `second` was sized
    second["c"] = b"2"
    second["a"] = b"3"
    assert numbers.number == {"a": 0, "b": 1, "c": 2} and numbers.ids == ["a", "b", "c"]
    assert dict(first) == {"c": b"1"} and dict(second) == {"a": b"3", "c": b"2"}
    assert list(second) == ["a", "c"]  # numbering order
    with pytest.raises(KeyError):
        first["a"]
    with pytest.raises(ValueError, match="None"):
        first["a"] = None  # type: ignore[assignment]


def test_sender_rounds_hold_round_numbers_only() -> None:
    rounds = SenderRounds(PeerNumbers(["a"]))
    rounds["a"] = 2**31 - 1
    rounds["b"] = 0  # numbered now: the array grows
    assert dict(rounds) == {"a": 2**31 - 1, "b": 0} and rounds.slots.itemsize == 4
    for bad in (-1, 2**31, None, 1.0):
        with pytest.raises(ValueError, match="round numbers"):
            rounds["a"] = bad  # type: ignore[assignment]
    assert rounds["a"] == 2**31 - 1


@given(prenumbered=st.lists(st.sampled_from(PEERS), unique=True), ops=operations)
def test_peer_numbers_make_the_inbox_maps_a_node_keeps_as_dicts(
    prenumbered: list[str], ops: list[tuple[str, str | None, int | None]]
) -> None:
    """PeerNumbers is the admission inbox's SenderMaps: its maps and its forgetting of old
    rounds behave as DictMaps' (a node's plain dicts)."""
    numbers, plain = PeerNumbers(prenumbered), DictMaps()
    pairs = [(numbers.rounds(), plain.rounds(), plain), (numbers.digests(), plain.digests(), None)]
    for op, peer, value in ops:
        for numbered, reference, forgets in pairs:
            if op == "set":
                numbered[peer] = reference[peer] = value if forgets else bytes([value])  # type: ignore[index]
            elif op == "del" and peer in reference:
                del numbered[peer], reference[peer]  # type: ignore[arg-type]
            elif op == "drop_below" and forgets is not None:
                numbers.drop_below(numbered, value)  # type: ignore[arg-type]
                forgets.drop_below(reference, value)  # type: ignore[arg-type]
            assert dict(numbered) == dict(reference)
    with pytest.raises(TypeError):
        numbers.drop_below({}, 0)  # only a map it made
