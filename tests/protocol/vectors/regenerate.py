"""Rewrite the golden wire vectors: `python tests/protocol/vectors/regenerate.py`.

Only run this for a deliberate wire-format change (and bump PROTOCOL_VERSION with it);
tests/protocol/test_protocol_vectors.py exists to make accidental changes fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from golden_fixtures import MESSAGES, SEALED_MESSAGE, SEALED_NAME, SIGNING_SEED  # noqa: E402

from protocol.codec import encode  # noqa: E402
from protocol.envelope import seal  # noqa: E402


def main() -> None:
    for name, message in MESSAGES.items():
        path = HERE / f"{name}.bin"
        path.write_bytes(encode(message))
        print(f"wrote {path.name} ({path.stat().st_size} bytes)")
    path = HERE / f"{SEALED_NAME}.bin"
    path.write_bytes(seal(SEALED_MESSAGE, SIGNING_SEED))
    print(f"wrote {path.name} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
