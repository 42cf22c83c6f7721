"""Human-friendly peer names: "adjective-adjective-animal", a pure function of the peer id.

The same id gives the same name on every machine and in every run (SHA-256 of the id, not
Python's salted `hash`), so a name read on one peer's dashboard finds the same peer on another's.
The id stays beside the name wherever it is shown: 64 x 63 x 64 names can collide, ids cannot.
"""

from __future__ import annotations

import hashlib

ADJECTIVES = (
    "agile", "amber", "ancient", "bold", "brave", "bright", "brisk", "calm",
    "clever", "cosmic", "crimson", "curious", "dapper", "daring", "dusty", "eager",
    "early", "fancy", "fierce", "gentle", "giant", "gleaming", "golden", "grand",
    "hasty", "hidden", "humble", "icy", "jolly", "keen", "lively", "lucky",
    "mellow", "merry", "mighty", "misty", "nimble", "noble", "patient", "plucky",
    "polished", "proud", "quick", "quiet", "rapid", "rustic", "scarlet", "shiny",
    "silent", "silver", "sleek", "sly", "snowy", "solar", "speedy", "steady",
    "stormy", "sunny", "swift", "tame", "tiny", "vivid", "wild", "witty",
)  # fmt: skip
ANIMALS = (
    "albatross", "alpaca", "badger", "bat", "bear", "beaver", "bison", "camel",
    "cheetah", "cobra", "condor", "cougar", "coyote", "crane", "crow", "deer",
    "dingo", "dolphin", "eagle", "eel", "elk", "falcon", "ferret", "finch",
    "fox", "gecko", "gibbon", "goose", "gorilla", "hare", "hawk", "heron",
    "hyena", "ibis", "jackal", "jaguar", "koala", "lemur", "leopard", "llama",
    "lynx", "magpie", "marmot", "mole", "moose", "narwhal", "newt", "octopus",
    "okapi", "orca", "osprey", "otter", "owl", "panda", "panther", "parrot",
    "pelican", "puffin", "raven", "salmon", "seal", "shark", "tiger", "walrus",
)  # fmt: skip


def peer_name(peer_id: str) -> str:
    """The peer's friendly name, e.g. "swift-amber-otter": two different adjectives and an animal."""
    digest = hashlib.sha256(str(peer_id).encode("utf-8")).digest()
    first = digest[0] % len(ADJECTIVES)
    second = digest[1] % (len(ADJECTIVES) - 1)
    if second >= first:
        second += 1  # never "swift-swift-otter"
    animal = int.from_bytes(digest[2:4], "big") % len(ANIMALS)
    return f"{ADJECTIVES[first]}-{ADJECTIVES[second]}-{ANIMALS[animal]}"
