"""The default of each peer knob that more than one settings class carries, written once.

A peer's round knobs reach it through several classes: the node's `[node]` config
(swarmp2p/node_config.py), the simulator's `Scenario`, and the `PeerSettings` both turn into
(swarmp2p/peer_settings.py). Each class keeps its own field (its own layer, validators and
docs), but takes its default from here, so a default changed in one place is changed for all.
No imports: the CLI loads this at start.
"""

from __future__ import annotations

QUESTIONS_PER_ROUND = 4
"""Question groups each peer answers per round (a swarm rule)."""
N_LOCAL = 4
"""A peer's own question groups per update."""
N_EXTERNAL = 4
"""Other peers' question groups per update."""
MAX_GROUPS_PER_PEER = 2
"""At most this many of the external groups come from one peer."""
COLLECT_FRACTION = 0.6
"""Share of the time from opening a round to its end spent collecting peers' batches."""
FETCH_TIMEOUT_S = 5.0
"""How long one fetch of a peer's batch may take."""
MIN_ROUND_REMAINING = 0.5
"""A round with less than this share of its time left when a peer gets to it is skipped."""
