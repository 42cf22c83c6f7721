"""The Python side names each contract constant once, with the contract's value.

`MAX_WINNERS` was 64 in protocol/limits.py (the wire bound of a WinnersVote) and 32 in the chain
adapter and the contract; `REWARD_SCALE` was written out twice in swarmp2p/chain. Each now has one
definition; these tests read the Vyper source, so a change on either side fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import protocol.limits
import swarmp2p.chain
import swarmp2p.chain.coordinator

CONTRACT = Path(swarmp2p.chain.__file__).parent / "contracts" / "SwarmCoordinator.vy"


def contract_constant(name: str) -> int:
    """The value of `NAME: public(constant(uint256)) = <int expression>` in the contract."""
    match = re.search(rf"^{name}: public\(constant\(uint256\)\) = ([0-9*]+)$", CONTRACT.read_text(), re.M)
    assert match, f"{name} not found in {CONTRACT}"
    return eval(match.group(1), {"__builtins__": {}})  # digits and ** only (checked by the regex)


def assigned_names(path: str) -> set[str]:
    """Names a module assigns at its top level (an import is not an assignment)."""
    tree = ast.parse(Path(path).read_text())
    return {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def test_contract_constant_reader() -> None:
    assert contract_constant("REWARD_SCALE") == 10**6


@pytest.mark.parametrize(
    "python_value",
    [protocol.limits.MAX_WINNERS, swarmp2p.chain.coordinator.MAX_WINNERS],
    ids=["protocol.limits", "chain.coordinator"],
)
def test_max_winners_is_the_contracts(python_value: int) -> None:
    # A vote the wire accepts must fit the contract's DynArray, and the other way round.
    assert python_value == contract_constant("MAX_WINNERS")


def test_max_winners_is_defined_once() -> None:
    assert swarmp2p.chain.coordinator.MAX_WINNERS is protocol.limits.MAX_WINNERS
    assert "MAX_WINNERS" not in assigned_names(swarmp2p.chain.coordinator.__file__)


def test_reward_scale_is_the_contracts_and_defined_once() -> None:
    assert swarmp2p.chain.REWARD_SCALE == contract_constant("REWARD_SCALE")
    assert swarmp2p.chain.coordinator.REWARD_SCALE is swarmp2p.chain.REWARD_SCALE
    assert "REWARD_SCALE" not in assigned_names(swarmp2p.chain.coordinator.__file__)
