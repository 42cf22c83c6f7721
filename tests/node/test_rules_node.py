"""A joiner adopts the swarm's scoring rules from its bootstrap's signed Hello (node.py code path),
and old peers / old swarm.json files give one-line errors.

The swarm's first peer A fixes the rules from ITS config; joiner B is configured differently
(task order, format reward, questions per round). B must verify A's honest batches and A must
verify B's: with B's local rules (what every node did before protocol 2) it cannot.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from protocol.envelope import peer_id_from_seed, seal
from protocol.messages import PROTOCOL_VERSION, Completion, Hello, QuestionGroup, RolloutBatch
from protocol.verification import verify_batch
from swarmp2p.hello import learn_schedule, open_hello
from swarmp2p.node_config import NodeConfig, NodeError
from swarmp2p.node_setup import swarm_setup
from swarmp2p.peer import PeerSettings, assigned_questions
from swarmp2p.rules import rules_of_config
from swarmp2p.swarm_file import load_saved_schedule, new_schedule, save_schedule
from trainer.config import TrainerConfig
from trainer.tasks import ReasoningGymRegistry

SEED_A = hashlib.sha256(b"rules bootstrap").digest()
SEED_B = hashlib.sha256(b"rules joiner").digest()
PEER_A, PEER_B = peer_id_from_seed(SEED_A), peer_id_from_seed(SEED_B)

NODE_A = NodeConfig(questions_per_round=2, n_local=2)
TRAINER_A = TrainerConfig(tasks=("basic_arithmetic", "base_conversion"), format_reward=0.5)
NODE_B = NodeConfig(questions_per_round=3, n_local=3, n_external=6)
TRAINER_B = TrainerConfig(tasks=("base_conversion", "basic_arithmetic"), format_reward=0.2, lr=3e-4)


def _bootstrap_hello() -> bytes:
    schedule = new_schedule(10.0, 1_700_000_000_000, rules_of_config(TRAINER_A, NODE_A.questions_per_round))
    hello = Hello(PROTOCOL_VERSION, PEER_A, schedule, 0, ("/ip4/127.0.0.1/tcp/4001",), "tiny")
    return seal(hello, SEED_A)


def _honest_batch(settings: PeerSettings, registry: ReasoningGymRegistry, seed: bytes, round_number: int):
    """A batch exactly as an honest peer with these settings publishes it: its assigned questions,
    each answered right, formatted-but-wrong and unformatted, rewards from its own registry."""
    peer_id = peer_id_from_seed(seed)
    questions = assigned_questions(settings, round_number, 0, peer_id)
    groups = []
    for ref in questions:
        _prompt, answer = registry.question(ref)
        texts = (f"<answer>{answer}</answer>", "<answer>no idea</answer>", "no idea")
        groups.append(QuestionGroup(ref, tuple(Completion(t, registry.score(ref, t)) for t in texts)))
    return RolloutBatch(settings.swarm_id, round_number, 0, peer_id, tuple(groups))


def _verdict(settings: PeerSettings, registry: ReasoningGymRegistry, batch: RolloutBatch):
    # What Peer._verify does with a fetched batch: re-derive the author's questions, re-score.
    expected = assigned_questions(settings, batch.round, batch.stage, batch.peer_id)
    return verify_batch(
        batch,
        registry,
        expected_questions=expected,
        limits=settings.verification_limits,
        tolerance=settings.reward_tolerance,
    )


def test_joiner_adopts_the_swarm_rules_from_the_bootstrap_hello():
    schedule = open_hello(_bootstrap_hello(), PEER_A).schedule
    a = swarm_setup(schedule, NODE_A, TRAINER_A)
    b = swarm_setup(schedule, NODE_B, TRAINER_B)

    # The first peer's own config IS the swarm's rules: nothing to report.
    assert a.notice is None
    # The joiner follows the swarm, keeps its local knobs, and says what it ignored, once.
    assert b.peer_settings.tasks == ("basic_arithmetic", "base_conversion")
    assert b.peer_settings.questions_per_round == 2
    assert (b.peer_settings.n_local, b.peer_settings.n_external) == (3, 6)
    assert b.registry.task_names() == ("basic_arithmetic", "base_conversion")
    assert b.trainer_config.tasks == ("basic_arithmetic", "base_conversion")
    assert b.trainer_config.format_reward == 0.5
    assert b.trainer_config.lr == 3e-4  # local, not a rule
    assert b.notice == (
        "swarm rules: tasks basic_arithmetic,base_conversion; questions_per_round 2; format_reward 0.5 "
        "(local config's tasks base_conversion,basic_arithmetic; questions_per_round 3; "
        "format_reward 0.2 ignored)"
    )

    from_a = _honest_batch(a.peer_settings, a.registry, SEED_A, 5)
    from_b = _honest_batch(b.peer_settings, b.registry, SEED_B, 5)
    assert any(0 < c.reward < 1 for g in from_a.groups for c in g.completions)  # format reward counts
    for verifier in (a, b):
        for batch in (from_a, from_b):
            verdict = _verdict(verifier.peer_settings, verifier.registry, batch)
            assert verdict.ok, (verifier.peer_settings.tasks, batch.peer_id, verdict)

    # Before protocol 2 the joiner verified with its LOCAL rules: honest batches were rejected.
    local_settings = PeerSettings(
        swarm_id=schedule.swarm_id,
        seed=schedule.seed,
        tasks=TRAINER_B.tasks,
        questions_per_round=NODE_B.questions_per_round,
    )
    local_registry = ReasoningGymRegistry(TRAINER_B.tasks, format_weight=TRAINER_B.format_reward)
    assert not _verdict(local_settings, local_registry, from_a).ok


def test_a_weighted_swarm_derives_and_verifies_questions_by_its_weights():
    # The swarm draws only basic_arithmetic (weight 0 for base_conversion); the joiner's local
    # config is uniform. It must derive (and so verify) questions by the swarm's weights.
    trainer = TrainerConfig(tasks=TRAINER_A.tasks, weights=(1.0, 0.0), format_reward=0.5)
    schedule = new_schedule(10.0, 0, rules_of_config(trainer, 4))
    a = swarm_setup(schedule, NODE_A, trainer)
    b = swarm_setup(schedule, NODE_B, TRAINER_A)
    assert b.peer_settings.weights == (1.0, 0.0)
    assert b.notice is not None and "weights 1,0" in b.notice
    # Over fixed swarm seeds, not the random one new_schedule drew: the outcome must not depend
    # on luck. (Seeds 0 and 21, among others, give peer A only basic_arithmetic questions in
    # round 3 under uniform weights too, which made the last check below pass by accident for
    # about one random seed in 11.)
    for seed in range(200):
        swarm = attrs.evolve(b.peer_settings, seed=seed)
        for round_number in range(5):
            assert {q.task for q in assigned_questions(swarm, round_number, 0, PEER_B)} == {
                "basic_arithmetic"
            }
        uniform = attrs.evolve(swarm, weights=())
        # A round in which uniform weights would ask A for something else: there, a verifier that
        # ignored the weights would refuse A's honest batch.
        round_number = next(
            r
            for r in range(3, 200)
            if assigned_questions(uniform, r, 0, PEER_A) != assigned_questions(swarm, r, 0, PEER_A)
        )
        from_a = _honest_batch(attrs.evolve(a.peer_settings, seed=seed), a.registry, SEED_A, round_number)
        assert _verdict(swarm, b.registry, from_a).ok, seed
        assert not _verdict(uniform, b.registry, from_a).ok, seed  # what ignoring the weights would do


def test_swarm_rules_naming_an_unbuildable_task_is_a_one_line_node_error():
    rules = {**rules_of_config(TRAINER_A, 2), "tasks": ("basic_arithmetic", "no_such_task")}
    schedule = new_schedule(10.0, 0, rules)
    with pytest.raises(NodeError) as caught:
        swarm_setup(schedule, NODE_B, TRAINER_B)
    assert "no_such_task" in str(caught.value) and "\n" not in str(caught.value)


def test_local_rules_that_cannot_go_on_the_wire_are_a_node_error():
    bad = TrainerConfig(tasks=("basic_arithmetic",), weights=(float("inf"),))
    with pytest.raises(NodeError, match="cannot be sent to peers"):
        new_schedule(10.0, 0, rules_of_config(bad, 2))


def test_saved_schedule_keeps_the_rules(tmp_path: Path):
    schedule = open_hello(_bootstrap_hello(), PEER_A).schedule
    save_schedule(tmp_path, schedule)
    assert load_saved_schedule(tmp_path) == schedule
    assert load_saved_schedule(tmp_path / "absent") is None


OLD_SWARM_JSON = {"swarm_id": "0a1b2c3d4e5f", "genesis_ms": 1, "round_ms": 30000, "stage_count": 1, "seed": 7}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (json.dumps(OLD_SWARM_JSON), "saved by an older swarmp2p (no tasks, weights, questions_per_round"),
        ("{not json", "is corrupt"),
        ("[1, 2]", "is corrupt"),
        (json.dumps({**OLD_SWARM_JSON, "tasks": ["a"], "weights": [], "questions_per_round": 4,
                     "format_reward": 0.2, "difficulty": -1}), "saved by an older swarmp2p (no game)"),
        (json.dumps({**OLD_SWARM_JSON, "tasks": ["a"], "weights": [], "questions_per_round": 4,
                     "format_reward": 0.2, "difficulty": -1, "game": "single", "x": 1}), "unknown keys x"),
        (json.dumps({**OLD_SWARM_JSON, "tasks": ["a"], "weights": [], "questions_per_round": 4,
                     "format_reward": 2.0, "difficulty": -1, "game": "single"}), "format_reward: 2.0 not in"),
    ],
)  # fmt: skip
def test_bad_or_old_swarm_json_is_one_line(tmp_path: Path, content: str, expected: str):
    (tmp_path / "swarm.json").write_text(content)
    with pytest.raises(NodeError) as caught:
        load_saved_schedule(tmp_path)
    text = str(caught.value)
    assert expected in text and "\n" not in text
    assert "delete" in text.lower()


class _OldBootstrap:
    """A bootstrap peer running protocol 1: answers hello requests with its old hello."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.asked = 0

    async def request_hello(self, peer_id: str, timeout_s: float) -> bytes:
        self.asked += 1
        return self.raw

    def add_known_peer(self, *args: object) -> None:
        raise AssertionError("an old peer's hello must not be used")


def test_joining_an_old_version_swarm_fails_at_once_with_one_line():
    from tests.protocol.test_rules_codec import PEER, _old_sealed_hello

    network = _OldBootstrap(_old_sealed_hello())
    addr = f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}"

    async def join() -> None:
        with trio.fail_after(30):  # far below the join timeout: a version mismatch is final
            await learn_schedule(network, (addr,), timeout_s=3600)

    with pytest.raises(NodeError) as caught:
        trio.run(join)
    text = str(caught.value)
    assert f"peer speaks protocol 1, we speak {PROTOCOL_VERSION}" in text and "\n" not in text
    assert network.asked == 1


def test_cli_node_with_an_old_swarm_json_exits_with_one_line(tmp_path: Path):
    data_dir = tmp_path / "node"
    data_dir.mkdir()
    (data_dir / "swarm.json").write_text(json.dumps(OLD_SWARM_JSON))
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "older swarmp2p" in errors[0], done.stderr


def test_a_peer_with_other_rules_is_reported_once_from_its_hellos():
    # On a chain every peer takes the rules from its own config; a hello tells us when another
    # peer's differ (all batches between us would be rejected as forged), once per peer.
    from swarmp2p.hello import receive_hellos
    from swarmp2p.ports import InboundMessage

    ours = new_schedule(10.0, 0, rules_of_config(TRAINER_A, 2))
    theirs = attrs.evolve(ours, format_reward=0.3, tasks=tuple(reversed(ours.tasks)))
    same = attrs.evolve(ours, genesis_ms=5)  # clock fields differ, rules do not: nothing to say

    def hello_from(seed: bytes, schedule) -> InboundMessage:
        hello = Hello(
            PROTOCOL_VERSION, peer_id_from_seed(seed), schedule, 0, ("/ip4/127.0.0.1/tcp/1",), "tiny"
        )
        return InboundMessage(topic="t", data=seal(hello, seed), transport_sender=peer_id_from_seed(seed))

    class Book:
        def __init__(self) -> None:
            self.known: list[str] = []

        def add_known_peer(self, peer_id: str, addrs: tuple[str, ...]) -> None:
            self.known.append(peer_id)

    lines: list[str] = []
    stats = {"hellos_accepted": 0, "hellos_rejected": 0}
    book = Book()

    async def main() -> None:
        send, receive = trio.open_memory_channel(10)
        async with send:
            await send.send(hello_from(SEED_B, theirs))
            await send.send(hello_from(SEED_B, theirs))
            await send.send(hello_from(SEED_A, same))
        await receive_hellos(book, receive, stats, ours, lines.append)

    trio.run(main)
    assert stats["hellos_accepted"] == 3 and book.known == [PEER_B, PEER_B, PEER_A]
    assert stats["peers_with_other_rules"] == 1
    assert len(lines) == 1 and lines[0].startswith(
        f"peer {PEER_B} follows other swarm rules (tasks, format_reward)"
    )


def test_a_bootstrap_that_does_not_serve_hello_is_reported_at_once():
    # A libp2p host that is not a swarmp2p node (or a wrong address on someone else's node):
    # reachable, but it refuses /swarmp2p/hello/1.0.0. Waiting out the join timeout cannot help.
    import multiaddr
    from libp2p import new_host
    from libp2p.crypto.ed25519 import create_new_key_pair

    from swarmp2p.net import NetworkSettings, open_libp2p_network

    async def join() -> str:
        stranger = new_host(key_pair=create_new_key_pair())
        async with stranger.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            addr = f"{stranger.get_addrs()[0]}"
            if "/p2p/" not in addr:
                addr += f"/p2p/{stranger.get_id().to_base58()}"
            async with open_libp2p_network(create_new_key_pair(), NetworkSettings(bootstrap=(addr,))) as net:
                with trio.fail_after(20), pytest.raises(NodeError) as caught:  # far below the join timeout
                    await learn_schedule(net, (addr,), timeout_s=3600)
                return str(caught.value)

    text = trio.run(join)
    assert "/swarmp2p/hello/1.0.0" in text and "\n" not in text, text
