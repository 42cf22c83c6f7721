"""Content keys: what makes two reasoning-gym questions "the same question" for a held-out split.

Exact text is not enough. Two number_sequence items with different text but the same last term
and answer ask the same thing of the model (GRPO's held-out gain sat on exactly those: 47 of 100
test questions shared their ending and answer with a pre-training item), and `58 + 26` and
`26 + 58` are one sum. So every held-out split is cut by a **content key**, a canonical string
that near-duplicates share, and no pre-training item, tokenizer-corpus text or training draw may
share a key with a held-out question (protocol.questions.heldout_split hashes the key).

A key is deliberately coarse: when in doubt two questions share one, which only moves both to
the same side of the split. Per task (docs/trainer.md lists them):
- arithmetic (`chain_sum`, `basic_arithmetic`, `products`, ...): the multiset of operand
  magnitudes (order, signs and operators ignored: `58 + 26`, `26 - 58` and `-26 * 58` share one);
- `leg_counting`: the multiset of (animal, count);
- `number_sequence`: (last shown term, answer), the pair the memorised endings shared;
- `count_bits`: the number;
- `letter_counting`: (letter, the multiset of words);
- any other task: its question text with whitespace collapsed (text only: no content rule known).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

KEY_VERSION = 1
"""Bumped when a key function changes: stored evaluation sets and built models depend on it."""

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _operands(entry: Mapping[str, Any]) -> str:
    expression = str(entry.get("metadata", {}).get("expression") or entry["question"])
    magnitudes = sorted(_NUMBER.findall(expression), key=lambda text: (float(text), text))
    return "operands:" + ",".join(magnitudes)


def _legs(entry: Mapping[str, Any]) -> str:
    animals = entry["metadata"]["animals"]
    return "animals:" + ",".join(f"{name}x{count}" for name, count in sorted(animals.items()))


def _sequence_ending(entry: Mapping[str, Any]) -> str:
    terms = entry["metadata"]["sequence"]
    return f"ending:{terms[-2]}->{terms[-1]}"


def _bits(entry: Mapping[str, Any]) -> str:
    return f"number:{entry['metadata']['number']}"


def _letters(entry: Mapping[str, Any]) -> str:
    metadata = entry["metadata"]
    return f"letter:{metadata['target_letter']}:" + ",".join(sorted(metadata["span"]))


def _text(entry: Mapping[str, Any]) -> str:
    return "text:" + " ".join(str(entry["question"]).split())


KEY_FUNCTIONS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "basic_arithmetic": _operands,
    "chain_sum": _operands,
    "decimal_chain_sum": _operands,
    "products": _operands,
    "leg_counting": _legs,
    "number_sequence": _sequence_ending,
    "count_bits": _bits,
    "letter_counting": _letters,
}


def content_key(task: str, entry: Mapping[str, Any]) -> str:
    """The content key of reasoning-gym item `entry` of `task` (never raises for a well-formed
    item; a task's key function that cannot read the item falls back to the text key)."""
    function = KEY_FUNCTIONS.get(task, _text)
    try:
        return function(entry)
    except (KeyError, TypeError, IndexError, ValueError):
        return _text(entry)
