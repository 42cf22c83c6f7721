"""Ship the default tiny model (and the default held-out sets) with the package, or check that the
shipped files are what the code builds.

    python scripts/ship_tiny.py --check             # build the defaults here, compare with the shipped files
    python scripts/ship_tiny.py --write             # build them and ship the result (replaces any tiny-*)
    python scripts/ship_tiny.py --write --from DIR  # ship a build made already (tiny.json: the defaults)

A build takes about four minutes on 2 cores. Run --write whenever a default that shapes the model
changes (tests/trainer/test_tiny_shipped.py fails until then, naming this command). See trainer/tiny.py for
why the default build is shipped. The default settings' held-out question sets (validation and test,
trainer/eval_set_cache.py) are scanned and shipped or checked with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import attrs

from trainer.config import TrainerConfig
from trainer.eval_set_cache import SHIPPED_DIR as SHIPPED_SETS
from trainer.eval_set_cache import store_shipped
from trainer.tasks import ReasoningGymRegistry
from trainer.tiny import (
    SHIPPED_DIR,
    TinySpec,
    build_tiny,
    checksums,
    read_checksums,
    tiny_folder,
    write_checksums,
)


def build(spec: TinySpec, into: Path) -> Path:
    folder = tiny_folder(into, spec)
    started = time.monotonic()

    def progress(step: int, total: int, loss: float) -> None:
        if step == 1 or step % 100 == 0 or step == total:
            print(f"  pre-training step {step}/{total}, loss {loss:.3f} ({time.monotonic() - started:.0f} s)")

    print(f"building tiny-{spec.fingerprint()} ({spec.pretrain_steps} pre-training steps)…")
    build_tiny(folder, spec, progress)
    print(f"built in {time.monotonic() - started:.0f} s")
    return folder


def scan_sets(into: Path) -> list[Path]:
    """The default settings' held-out sets (validation and test), scanned into `into`."""
    config = TrainerConfig()
    registry = ReasoningGymRegistry(config.tasks, difficulty=config.difficulty)
    return [
        store_shipped(
            registry.task_names(),
            config.eval_seed,
            config.eval_questions,
            registry.content_key,
            split,
            difficulty=config.difficulty,
            into=into,
        )
        for split in ("validation", "test")
    ]


def check_sets(work: Path) -> bool:
    same = True
    for path in scan_sets(work / "sets"):
        shipped = SHIPPED_SETS / path.name
        ok = shipped.exists() and shipped.read_bytes() == path.read_bytes()
        print(f"  eval-sets/{path.name}: {'same' if ok else 'differs or missing'}")
        same = same and ok
    return same


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="build here and compare with the shipped files")
    action.add_argument("--write", action="store_true", help="ship a build of the default settings")
    parser.add_argument("--from", dest="source", type=Path, help="with --write: an existing build folder")
    args = parser.parse_args()

    spec = TinySpec.of(TrainerConfig())
    target = tiny_folder(SHIPPED_DIR, spec)
    with tempfile.TemporaryDirectory(prefix="ship-tiny-") as work:
        if args.source is not None:
            if not args.write:
                parser.error("--from goes with --write")
            built = args.source
            found = json.loads((built / "tiny.json").read_text())
            if found != json.loads(json.dumps(attrs.asdict(spec))):
                print(f"{built}/tiny.json is not the default settings: {found}", file=sys.stderr)
                return 2
        else:
            built = build(spec, Path(work))
        made = checksums(built)
        if args.check:
            if not (target / "tiny.json").exists():
                print(f"nothing shipped for tiny-{spec.fingerprint()}: run --write", file=sys.stderr)
                return 1
            shipped = read_checksums(target)
            names = made.keys() | shipped.keys()
            differ = sorted(name for name in names if made.get(name) != shipped.get(name))
            for name in sorted(made):
                mark = "differs" if name in differ else "same"
                print(f"  {name}: {mark} ({made[name][:16]})")
            sets_same = check_sets(Path(work))
            if differ or not sets_same:
                print(f"the build here differs from the shipped files: {', '.join(differ) or 'eval-sets'}")
                return 1
            print(f"the build here is byte for byte the shipped tiny-{spec.fingerprint()} and held-out sets")
            return 0
        for old in SHIPPED_DIR.glob("tiny-*"):
            shutil.rmtree(old)
        target.mkdir(parents=True)
        for name in made:
            shutil.copyfile(built / name, target / name)
        write_checksums(target)
        for old in SHIPPED_SETS.glob("*.json"):
            old.unlink()
        for path in scan_sets(SHIPPED_SETS):
            print(f"shipped held-out set {path.name}")
        print(f"shipped {target.relative_to(Path.cwd()) if target.is_relative_to(Path.cwd()) else target}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
