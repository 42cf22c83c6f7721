"""Where a swarm is in time: round and stage from a clock reading, as pure arithmetic.

Stage k of the swarm (counting every stage of every round from 0) runs from
`genesis_ms + k * stage_ms` to `genesis_ms + (k + 1) * stage_ms`; round r, stage s is
stage k = r * stage_count + s. Pure functions: the clock is an argument.

The one such calculation: the chain's embedded stage manager (swarmp2p/chain/embedded.py) and
the chain-less round clock (swarmp2p/schedule.py) both use it, so they cannot disagree on where a
round ends.
"""

from __future__ import annotations

import attrs

from protocol import limits


@attrs.frozen
class StageSchedule:
    genesis_ms: int
    stage_ms: int = attrs.field()
    stage_count: int = attrs.field()

    @stage_ms.validator
    def _positive_stage(self, _attribute: object, value: int) -> None:
        if value <= 0:
            raise ValueError(f"stage_ms must be positive, got {value}")

    @stage_count.validator
    def _valid_count(self, _attribute: object, value: int) -> None:
        if not 1 <= value <= limits.MAX_STAGES:
            raise ValueError(f"stage_count must be in 1..{limits.MAX_STAGES}, got {value}")

    def position(self, now_ms: int) -> tuple[int, int]:
        """(round, stage) the schedule is in at `now_ms`; (0, 0) before genesis."""
        index = max(now_ms - self.genesis_ms, 0) // self.stage_ms
        return divmod(index, self.stage_count)

    def stage_ends_ms(self, round: int, stage: int) -> int:
        return self.genesis_ms + (round * self.stage_count + stage + 1) * self.stage_ms

    def stages_between(self, behind: tuple[int, int], ahead: tuple[int, int]) -> int:
        """How many single-stage advances take `behind` to `ahead` (0 if not behind)."""
        distance = (ahead[0] - behind[0]) * self.stage_count + (ahead[1] - behind[1])
        return max(distance, 0)
