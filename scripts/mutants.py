"""Hand-made mutation check of the sans-IO core (protocol/) and the round driver (swarmp2p/).

Each mutant removes or bends ONE rule (a text replacement that must match exactly once). For
each, the script copies the repository to a temporary directory (the shared working tree is
never touched), applies the mutant there, and runs the tests that pin that part of the code
(`-x`: a killed mutant stops at its first failing test). A mutant is killed when the tests
fail, survives when they pass. Prints one line per mutant and the score.

    python scripts/mutants.py                 # all mutants
    python scripts/mutants.py admission.      # only those whose id starts with this
    python scripts/mutants.py --list          # ids and descriptions, nothing run

Run it niced on a shared machine: each mutant runs pytest once (about 10-60 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent

CORE_TESTS = (
    "tests/test_admission_rules.py",
    "tests/test_round_core.py",
    "tests/test_protocol_rounds.py",
    "tests/test_protocol_verification.py",
    "tests/test_protocol_scoring.py",
)
CODEC_TESTS = ("tests/test_admission_rules.py", "tests/test_protocol_codec.py", "tests/test_rules_codec.py")
SAMPLING_TESTS = ("tests/test_admission_rules.py", "tests/test_protocol_sampling.py")
DRIVER_TESTS = (
    "tests/test_admission_rules.py",
    "tests/test_round_core.py",
    "tests/test_driver_rules.py",
    "tests/test_peer_inbound.py",
    "tests/test_peer_scoring_ban.py",
    "tests/test_netpeer_rounds.py",
    "tests/test_sim_dht_sweep.py",
)


@attrs.frozen
class Mutant:
    id: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...] = CORE_TESTS


A = "protocol/admission.py"
R = "protocol/rounds.py"
P = "swarmp2p/peer.py"
F = "swarmp2p/fetcher.py"

MUTANTS = (
    # ---- admission: fetched batches
    Mutant(
        "admission.signer",
        A,
        "if opened.signer != job.sender:",
        "if False:",
        "signer of a fetched batch not checked against the announcer",
    ),
    Mutant(
        "admission.round", A, "or batch.round != job.round\n", "\n", "round of a fetched batch not checked"
    ),
    Mutant(
        "admission.stage", A, "or batch.stage != job.stage\n", "\n", "stage of a fetched batch not checked"
    ),
    Mutant(
        "admission.swarm",
        A,
        "batch.swarm_id != rules.swarm_id\n            or ",
        "",
        "swarm of a fetched batch not checked",
    ),
    Mutant(
        "admission.group_count",
        A,
        "or (job.group_count >= 0 and len(batch.groups) != job.group_count)\n",
        "\n",
        "announced group count not checked",
    ),
    Mutant(
        "admission.verdict",
        A,
        "if not verdict.ok:\n"
        '            return self.reject(verdict.reason or "invalid_batch", blame=job.sender)\n'
        "        if not self.machine",
        "if False:\n"
        '            return self.reject(verdict.reason or "invalid_batch", blame=job.sender)\n'
        "        if not self.machine",
        "the verifier's verdict ignored",
    ),
    Mutant(
        "admission.input_resolution",
        A,
        "        if isinstance(items, Verdict):  # what we hold decides: never cached",
        "        if isinstance(items, Verdict) and False:",
        "a later stage's references not resolved against the batches we hold (forged inputs pass)",
        tests=("tests/test_protocol_acr.py",),
    ),
    Mutant(
        "acr.rescore",
        "protocol/acr.py",
        "        if not self.answer.rescore:",
        "        if True:",
        "a critique's or resolution's claimed rewards taken on trust",
        tests=("tests/test_protocol_acr.py",),
    ),
    Mutant(
        "admission.digest",
        A,
        "if job.digest and digest != job.digest:",
        "if False:",
        "fetched bytes not checked against the announced digest",
    ),
    Mutant(
        "admission.kind",
        A,
        "if not isinstance(batch, RolloutBatch):",
        "if False:",
        "a fetched message of another kind not refused",
    ),
    Mutant(
        "admission.late_after_verify",
        A,
        "        if not self.machine.collecting(job.round, job.stage):\n"
        '            return self.reject("late"',
        '        if False:\n            return self.reject("late"',
        "a batch verified after the collect deadline still accepted",
    ),
    Mutant(
        "admission.banned_meanwhile",
        A,
        "if self.scores.is_banned(job.sender):",
        "if False:",
        "a batch of a peer banned while it was fetched accepted",
    ),
    Mutant(
        "admission.sweep_conflict",
        A,
        "if announced != digest:",
        "if False:",
        "a swept DHT batch that conflicts with the announcement accepted",
    ),
    Mutant(
        "admission.may_fetch",
        A,
        "        if not self.machine.collecting(job.round, job.stage):\n"
        '            self.reject("late", blame=None)\n            return False',
        "        if False:\n            return False",
        "fetch started after the round stopped collecting",
    ),
    # ---- admission: bans and blame
    Mutant(
        "admission.ban_on_proof",
        A,
        "if self.rules.ban_on_proof and reason in PROOF_OF_LYING:",
        "if False:",
        "no immediate ban on proof of lying",
    ),
    Mutant(
        "admission.blame_self",
        A,
        "if blame is not None and blame != self.rules.me:",
        "if blame is not None:",
        "a strike against ourselves possible",
    ),
    Mutant(
        "admission.training_pool",
        A,
        "return {peer: groups for peer, groups in inbox.external.items() if not self.scores.is_banned(peer)}",
        "return dict(inbox.external)",
        "training on batches of a peer banned after they were accepted",
    ),
    # ---- admission: announcements
    Mutant(
        "admission.heard_banned",
        A,
        "if sender in self.scores.banned:",
        "if False:",
        "a banned peer's announcements processed",
    ),
    Mutant(
        "admission.heard_oversized",
        A,
        "if len(data) > max_bytes:",
        "if False:",
        "an oversized announcement not blamed before opening",
    ),
    Mutant(
        "admission.heard_signer",
        A,
        "if opened.signer != sender:",
        "if False:",
        "an announcement relayed under another peer's name accepted",
    ),
    Mutant(
        "admission.heard_kind",
        A,
        "if not isinstance(announcement, RolloutAnnouncement):",
        "if False:",
        "a message of another kind on the announce topic not refused",
    ),
    Mutant(
        "admission.heard_swarm",
        A,
        "if announcement.swarm_id != rules.swarm_id:",
        "if False:",
        "an announcement for another swarm accepted",
    ),
    Mutant(
        "admission.stale",
        A,
        "if announcement.round < current:",
        "if announcement.round < current - 1:",
        "an announcement for the previous round considered",
    ),
    Mutant(
        "admission.early_cap",
        A,
        "if len(early) < rules.max_fetch_per_round and announcement.peer_id not in early:",
        "if True:",
        "early announcements unbounded and repeatable",
    ),
    Mutant(
        "admission.late_phase",
        A,
        "if self.machine.phase not in COLLECTING_PHASES:",
        "if False:",
        "an announcement after the collect deadline fetched",
    ),
    Mutant(
        "admission.wrong_stage",
        A,
        "if announcement.stage != state.stage:",
        "if False:",
        "an announcement for another stage fetched",
    ),
    Mutant(
        "admission.equivocation",
        A,
        "if previous != announcement.batch_digest:",
        "if False:",
        "two batches for one round not treated as equivocation",
    ),
    Mutant(
        "admission.flood",
        A,
        "== self.rules.max_duplicates_per_round + 1",
        "== self.rules.max_duplicates_per_round + 2",
        "flood threshold off by one",
    ),
    Mutant(
        "admission.size",
        A,
        "if announcement.size_bytes > self.rules.max_batch_bytes:",
        "if False:",
        "an announced batch over the size cap fetched",
    ),
    Mutant(
        "admission.fetch_limit",
        A,
        'if state.fetches >= self.rules.max_fetch_per_round:\n            return self.reject("fetch_limit"',
        'if False:\n            return self.reject("fetch_limit"',
        "per-round fetch limit not applied",
    ),
    Mutant(
        "admission.sampling",
        A,
        "if priority >= state.fetch_probability:",
        "if False:",
        "fetch sampling off (every announcement fetched)",
    ),
    Mutant(
        "admission.top_up_banned",
        A,
        "if not self.scores.is_banned(sender):",
        "if True:",
        "a top-up fetches a banned peer's deferred batch",
    ),
    Mutant(
        "admission.sweep_announced",
        A,
        "if peer == self.rules.me or peer in state.announced or self.scores.is_banned(peer):",
        "if peer == self.rules.me or self.scores.is_banned(peer):",
        "the sweep looks up peers that announced",
    ),
    Mutant(
        "admission.sweep_banned",
        A,
        "if peer == self.rules.me or peer in state.announced or self.scores.is_banned(peer):",
        "if peer == self.rules.me or peer in state.announced:",
        "the sweep looks up banned peers",
    ),
    Mutant(
        "admission.probability",
        A,
        "return min(1.0, fetch_sample / max(1, connected))",
        "return 1.0",
        "fetch_sample ignored",
    ),
    # ---- the game
    Mutant(
        "game.questions",
        "protocol/game.py",
        "expected_questions=self.questions(batch.round, batch.stage, batch.peer_id),",
        "expected_questions=None,",
        "questions a peer had to answer not enforced",
    ),
    Mutant(
        "game.rescore",
        "protocol/game.py",
        "rescore=self.rescore,",
        "rescore=False,",
        "claimed rewards taken on trust",
    ),
    # ---- codec and sampling rules admission relies on
    Mutant(
        "codec.hello_round",
        "protocol/codec.py",
        '"current_round": Int(-1, limits.MAX_UINT63)',
        '"current_round": Int(-2, limits.MAX_UINT63)',
        "a hello's round of -2 accepted",
        CODEC_TESTS,
    ),
    Mutant(
        "codec.bool_count",
        "protocol/codec.py",
        "    if isinstance(spec, Int):\n        if isinstance(value, bool) or not isinstance(value, int):",
        "    if isinstance(spec, Int):\n        if not isinstance(value, int):",
        "True accepted as a count",
        CODEC_TESTS,
    ),
    Mutant(
        "sampling.seed",
        "protocol/sampling.py",
        "key = _key(seed, peer, position)",
        "key = _key(0, peer, position)",
        "the choice of external groups ignoring the seed",
        SAMPLING_TESTS,
    ),
    Mutant(
        "sampling.alphabetical",
        "protocol/sampling.py",
        "(0, 0.0, key)\n",
        '(0, 0.0, b"")\n',
        "external groups in peer-name order (alphabetically first peers win)",
        SAMPLING_TESTS,
    ),
    # ---- the round machine
    Mutant(
        "rounds.collect_guard",
        R,
        "lambda machine, now_ms: now_ms >= machine.collect_until_ms",
        "lambda machine, now_ms: now_ms > machine.collect_until_ms",
        "training starts 1 ms after the collect deadline",
    ),
    Mutant(
        "rounds.abandon",
        R,
        "if self.phase in IN_PROGRESS:",
        "if False:",
        "a round overtaken mid-way not abandoned",
    ),
    Mutant(
        "rounds.stale_open",
        R,
        "if self._at(event.round, event.stage) <= self._at(self.round, self.stage):\n"
        "                return ()",
        "if self._at(event.round, event.stage) < self._at(self.round, self.stage):\n"
        "                return ()",
        "a duplicate RoundOpened restarts the round",
    ),
    Mutant(
        "rounds.late_result",
        R,
        "if position < self._at(self.round, self.stage):\n                return ()  # late result",
        "if False:\n                return ()  # late result",
        "late results of an abandoned round applied",
    ),
    Mutant(
        "rounds.skip",
        R,
        "if too_late_to_start(now_ms, said.stage_ends_ms, self.stage_ms, timing.min_round_remaining):",
        "if False:",
        "a round with too little left is started anyway",
    ),
    Mutant(
        "rounds.skip_once",
        R,
        "if self._at(said.round, said.stage) <= self._at(self.skipped_round, self.skipped_stage):",
        "if False:",
        "a skipped round is skipped (and recorded) at every poll",
    ),
    Mutant(
        "rounds.collect_fraction",
        R,
        "collect_until = now_ms + int(timing.collect_fraction * remaining)",
        "collect_until = now_ms + remaining",
        "collect window ignores collect_fraction",
    ),
    Mutant(
        "rounds.sweep_at",
        R,
        "sweep_at_ms=now_ms + int(timing.sweep_fraction * (collect_until - now_ms)),",
        "sweep_at_ms=now_ms,",
        "the DHT sweep runs at once",
    ),
    Mutant(
        "rounds.sweep_once",
        R,
        "and not self.swept\n            and now_ms >= self.sweep_at_ms",
        "and now_ms >= self.sweep_at_ms",
        "the DHT sweep repeats",
    ),
    Mutant(
        "rounds.sweep_phase",
        R,
        "and now_ms >= self.sweep_at_ms\n            and self.phase in COLLECTING_PHASES",
        "and now_ms >= self.sweep_at_ms",
        "the DHT sweep runs after collecting",
    ),
    Mutant(
        "rounds.sweep_off",
        R,
        "self.timing.dht_sweep\n            and self.round >= 0",
        "self.round >= 0",
        "dht_sweep = false ignored",
    ),
    Mutant(
        "rounds.current_round",
        R,
        "return max(self.round, self.skipped_round)",
        "return self.round",
        "a skipped round is not current for inbound messages",
    ),
    Mutant(
        "rounds.learn_min",
        R,
        "return estimate if known_ms is None else min(known_ms, estimate)",
        "return estimate if known_ms is None else max(known_ms, estimate)",
        "stage length keeps the largest estimate",
    ),
    Mutant(
        "rounds.wake_collect",
        R,
        "            wake_at = min(wake_at, self.collect_until_ms)\n",
        "",
        "the idle wait overshoots the collect deadline",
    ),
    Mutant(
        "rounds.round_over",
        R,
        "return self.phase is not Phase.IDLE and ends > 0 and now_ms >= ends",
        "return False",
        "work that outlasted its round is never cut short",
    ),
    # ---- the driver
    Mutant(
        "driver.training_pool",
        P,
        "self.inbox.training_pool(work.inbox),",
        "dict(work.inbox.external),",
        "the driver trains on peers banned after acceptance",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.idle",
        P,
        "self._feed(ev.Idle())  # the DHT sweep, when due",
        "pass",
        "the driver never tells the machine it is idle (no DHT sweep)",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.round_over",
        P,
        "if self.machine.round_over(self.clock.now_ms()):",
        "if False:",
        "the driver never re-polls when its work outlasted the round",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.early",
        P,
        "        for decision in self.inbox.release_early(round_number):\n"
        "            self.fetcher.take(decision)\n",
        "",
        "announcements heard before the round opened are dropped",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.skip_record",
        P,
        "self.rounds.skipped(action.round, action.stage, action.left_ms, now_ms)",
        "pass",
        "a skipped round leaves no record",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.hold_wakes",
        F,
        "            self._on_hold()\n",
        "            pass\n",
        "an announcement for the next round does not wake the loop",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.top_up",
        F,
        "                    top_up = self.inbox.top_up(job.round)\n",
        "                    top_up = None\n",
        "no top-up after a failed sampled fetch",
        DRIVER_TESTS,
    ),
    Mutant(
        "driver.serve_other",
        "swarmp2p/publisher.py",
        "if request.peer_id != self.peer_id:\n            return self._not_found",
        "if False:\n            return self._not_found",
        "serves a request meant for another peer",
        DRIVER_TESTS,
    ),
)


def _copy_repo(target: Path) -> None:
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "node_modules", "__pycache__", ".hypothesis", "*.egg-info"
    )
    for name in ("protocol", "swarmp2p", "simulator", "trainer", "tests", "pyproject.toml", "conftest.py"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, target / name)


def run_mutant(mutant: Mutant, workdir: Path) -> tuple[bool, float, str]:
    """(killed, seconds, last output line)."""
    path = workdir / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(
            f"{mutant.id}: the text to replace occurs {original.count(mutant.old)} times in {mutant.path}"
        )
    path.write_text(original.replace(mutant.old, mutant.new))
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
            cwd=workdir,
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        )
    finally:
        path.write_text(original)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return result.returncode != 0, time.monotonic() - started, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("prefix", nargs="?", default="", help="only mutants whose id starts with this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if m.id.startswith(args.prefix)]
    if args.list:
        for mutant in chosen:
            print(f"{mutant.id:28} {mutant.path:24} {mutant.what}")
        return 0
    survivors: list[Mutant] = []
    with tempfile.TemporaryDirectory(prefix="swarmp2p-mutants-") as tmp:
        workdir = Path(tmp)
        _copy_repo(workdir)
        for mutant in chosen:
            killed, seconds, _ = run_mutant(mutant, workdir)
            print(
                f"{'killed ' if killed else 'SURVIVED'} {mutant.id:28} {seconds:5.1f}s  {mutant.what}",
                flush=True,
            )
            if not killed:
                survivors.append(mutant)
    killed_count = len(chosen) - len(survivors)
    print(f"\nscore: {killed_count}/{len(chosen)} killed ({100 * killed_count / max(1, len(chosen)):.0f}%)")
    for mutant in survivors:
        print(f"  survived: {mutant.id} ({mutant.path}): {mutant.what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
