"""One round/stage calculation for the whole runtime: protocol.stage_schedule.StageSchedule.

The chain's embedded stage manager and the chain-less round clock (ScheduleCoordinator) each had
their own arithmetic (swarmp2p/chain/schedule.py and swarmp2p/schedule.py). The chain-less clock
now reads the chain's; the property below fails if either computes rounds its own way again.
Wall clocks: one (swarmp2p.clocks.RealClock), also used by the chain coordinator by default.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import swarmp2p.schedule
from protocol.messages import SwarmSchedule
from protocol.stage_schedule import StageSchedule
from swarmp2p.clocks import RealClock
from swarmp2p.schedule import ScheduleCoordinator

ROOT = Path(__file__).resolve().parents[2]


class FixedClock:
    def now_ms(self) -> int:
        return 0


@given(
    genesis=st.integers(0, 2**45),
    stage_ms=st.integers(1, 10**6),
    stages=st.integers(1, 16),
    offset=st.integers(0, 10**10),
)
def test_the_chain_less_clock_and_the_stage_manager_agree(
    genesis: int, stage_ms: int, stages: int, offset: int
) -> None:
    manager = StageSchedule(genesis, stage_ms, stages)  # what EmbeddedChain advances by
    coordinator = ScheduleCoordinator(SwarmSchedule("s", genesis, stage_ms * stages, stages, 1), FixedClock())
    info = coordinator.info_at(genesis + offset)
    assert (info.round, info.stage) == manager.position(genesis + offset)
    assert info.stage_ends_ms == manager.stage_ends_ms(info.round, info.stage)


def test_the_chain_less_clock_has_no_arithmetic_of_its_own() -> None:
    # Division or divmod in swarmp2p/schedule.py would be a second round calculation.
    tree = ast.parse(Path(swarmp2p.schedule.__file__).read_text())
    own = [
        node
        for node in ast.walk(tree)
        if (isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.FloorDiv | ast.Mod))
        or (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "divmod")
    ]
    # The only ones allowed: the constructor's validity check (round_ms % stage_count) and
    # handing the stage length to StageSchedule (round_ms // stage_count).
    assert len(own) <= 2, [ast.unparse(node) for node in own]


def test_one_wall_clock() -> None:
    # The chain coordinator used to have its own WallClock.
    classes = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "swarmp2p").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and "now_ms" in (text := ast.unparse(node)) and "time.time" in text
    }
    assert classes == {"swarmp2p/clocks.py"}, classes
    assert abs(RealClock().now_ms() - __import__("time").time() * 1000) < 5000
