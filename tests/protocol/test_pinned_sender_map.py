"""protocol/sender_map.py: what an operator reads of a SenderMap (its repr in a debugger or a
log line, the error of a misuse) names the map's kind and its entries."""

from __future__ import annotations

import pytest

from protocol.sender_map import PeerNumbers, SenderMap, SenderRounds


def test_drop_below_on_a_map_it_did_not_make_says_which_map_it_takes() -> None:
    numbers = PeerNumbers(["a"])
    with pytest.raises(TypeError) as raised:
        numbers.drop_below({"a": 1}, 2)
    assert str(raised.value) == "PeerNumbers.drop_below takes the map its rounds() made"


def test_a_sender_maps_repr_names_its_kind_and_entries() -> None:
    numbers = PeerNumbers(["b", "a"])
    rounds = SenderRounds(numbers)
    rounds["a"] = 3
    digests: SenderMap[bytes] = SenderMap(numbers)
    digests["b"] = b"\x01"
    assert repr(rounds) == "SenderRounds({'a': 3})"
    assert repr(digests) == "SenderMap({'b': b'\\x01'})"


def test_storing_none_says_why_a_sender_map_refuses_it() -> None:
    digests: SenderMap[bytes] = SenderMap(PeerNumbers())
    with pytest.raises(ValueError) as raised:
        digests["a"] = None  # type: ignore[assignment]
    assert str(raised.value) == "a SenderMap cannot hold None (it marks an empty slot)"


@pytest.mark.parametrize("kind", [SenderMap, SenderRounds])
def test_deleting_an_absent_sender_names_the_sender(kind: type[SenderMap[int]]) -> None:
    numbers = PeerNumbers(["known"])
    mapped = kind(numbers)
    for peer in ("known", "stranger"):  # numbered but empty, and never numbered
        with pytest.raises(KeyError) as raised:
            del mapped[peer]
        assert raised.value.args == (peer,)


@pytest.mark.parametrize("kind", [SenderMap, SenderRounds])
def test_reading_an_absent_sender_names_the_sender(kind: type[SenderMap[int]]) -> None:
    mapped = kind(PeerNumbers(["known"]))
    with pytest.raises(KeyError) as raised:
        mapped["known"]
    assert raised.value.args == ("known",)


@pytest.mark.parametrize("kind", [SenderMap, SenderRounds])
def test_a_map_grows_to_the_numbering_and_no_further(kind: type[SenderMap[int]]) -> None:
    # A slot per numbered peer is the module's memory bound (N x N slots in a simulation).
    numbers = PeerNumbers([f"p{i}" for i in range(5)])
    mapped = kind(numbers)
    assert len(mapped.slots) == 5
    numbers.of("p5")
    numbers.of("p6")
    mapped["p6"] = 1
    assert len(mapped.slots) == len(numbers) == 7
    mapped["p7"] = 2
    assert len(mapped.slots) == 8
