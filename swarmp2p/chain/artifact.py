"""The SwarmCoordinator contract: its Vyper source and the committed compiled artifact.

The artifact (ABI + deployment bytecode) is committed next to the source so that nodes never
need a compiler at run time; `tests/chain/test_chain_artifact.py` recompiles the source and compares,
so the two cannot drift. Regenerate with `swarmp2p chain compile`.

Both files live INSIDE the package (`swarmp2p/chain/contracts/`, shipped as package data) so
that an installed wheel carries them; the repository's top-level `contracts` is a symlink to
that folder, so there is one copy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

CONTRACTS_DIR = Path(__file__).resolve().parent / "contracts"
SOURCE_PATH = CONTRACTS_DIR / "SwarmCoordinator.vy"
ARTIFACT_PATH = CONTRACTS_DIR / "SwarmCoordinator.json"
CONTRACT_NAME = "SwarmCoordinator"


@attrs.frozen
class Artifact:
    abi: list[dict[str, Any]]
    bytecode: str  # 0x-prefixed deployment bytecode
    compiler: str
    source_sha256: str


def compile_source(source_path: Path = SOURCE_PATH) -> Artifact:
    """Compile the Vyper source with the installed `vyper` package (settings come from the
    source's pragmas: version, EVM version, optimization)."""
    import vyper

    source = source_path.read_text()
    output = vyper.compile_code(source, contract_path=source_path.name, output_formats=["abi", "bytecode"])
    return Artifact(
        abi=output["abi"],
        bytecode=output["bytecode"],
        compiler=f"vyper {vyper.__version__}",
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
    )


def artifact_json(artifact: Artifact) -> str:
    document = {
        "contractName": CONTRACT_NAME,
        "compiler": artifact.compiler,
        "sourceSha256": artifact.source_sha256,
        "abi": artifact.abi,
        "bytecode": artifact.bytecode,
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def write_artifact(artifact: Artifact, path: Path = ARTIFACT_PATH) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(artifact_json(artifact))
    tmp.replace(path)


def load_artifact(path: Path = ARTIFACT_PATH) -> Artifact:
    from swarmp2p.chain.errors import ChainConfigError

    try:
        document = json.loads(path.read_text())
        return Artifact(
            abi=document["abi"],
            bytecode=document["bytecode"],
            compiler=document["compiler"],
            source_sha256=document["sourceSha256"],
        )
    except FileNotFoundError:
        raise ChainConfigError(f"contract artifact not found: {path}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise ChainConfigError(f"contract artifact {path} is malformed: {error}") from None
