"""A peer on `swarmp2p chain devnet --backend embedded` plays consecutive rounds.

The devnet's own parts, in one process and on wall time: `start_devnet` (the embedded chain
served over HTTP), the devnet's stage manager (`_run_stage_manager`, advancing every stage over
HTTP), and the chain coordinator a node opens from the printed `--chain-rpc/--contract/--eth-key`,
driving the real round loop (`swarmp2p.peer.Peer`; simulated network and learner, which the
timing does not depend on).

The bug this pins: eth-tester stamps a block with the time its predecessor was mined, so the
contract's `stageStartedAt` was the time of the chain's previous transaction. A node reads a
stage's end as `stageStartedAt + stageDuration`, so each stage looked (nearly) over when it
began: the node played its first round (stage length not known yet), then skipped every
round ('skipping round 3: -1.5s of it left')."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import trio

from protocol.envelope import peer_id_from_seed
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy
from simulator.registry import SimTaskRegistry
from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.coordinator import open_coordinator
from swarmp2p.chain.devnet import start_devnet
from swarmp2p.chain.keys import load_key_file
from swarmp2p.cli_chain import _run_stage_manager, _StopRequest
from swarmp2p.clocks import RealClock
from swarmp2p.peer import Peer, PeerSettings

STAGE_SECONDS = 4  # whole seconds (the contract's stageDuration); the peer polls every second
STAGES = 4  # rounds the peer must play after its first


def test_a_devnet_peer_plays_every_round_after_its_first(tmp_path: Path) -> None:
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact

    chain, devnet = start_devnet(
        tmp_path / "devnet", 1, stage_seconds=STAGE_SECONDS, port=0, backend="embedded"
    )
    stop = _StopRequest()  # not entered: no signal handlers; the test sets the flag
    advancing: threading.Thread | None = None
    try:
        w3 = Web3(HTTPProvider(devnet.rpc))
        manager = ContractClient(w3, devnet.contract, load_artifact().abi, load_key_file(devnet.manager_key))
        coordinator = open_coordinator(devnet.rpc, devnet.contract, devnet.nodes[0].eth_key, tolerant=True)
        clock = RealClock()
        seed = hashlib.sha256(b"devnet-peer").digest()
        world = SimWorld(LinkModel(), seed=1, now_ms=clock.now_ms, round_of=lambda now: 0)
        network = world.attach(peer_id_from_seed(seed))
        registry = SimTaskRegistry()
        settings = PeerSettings(swarm_id="devnet", seed=5, tasks=registry.task_names())
        policy = SimPolicy(network.local_peer_id, registry, seed=5, store=CheckpointStore())

        async def inline(fn, *args):  # type: ignore[no-untyped-def]
            return fn(*args)

        peer = Peer(settings, seed, network, coordinator, policy, registry, clock, offload=inline)
        advancing = threading.Thread(
            target=_run_stage_manager, args=(manager, STAGE_SECONDS, 0, stop), kwargs={"quiet": True}
        )
        advancing.start()
        # A node loads its model first: it joins a running devnet, after the first advance,
        # and after the set-up's burst of blocks (deploy, funding, bootnode: timestamps must
        # increase, so they ran the chain's time a few seconds ahead of the wall clock).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            manager.call("currentRound") < 1 or w3.eth.get_block("latest")["timestamp"] > time.time()
        ):
            time.sleep(0.2)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(world.run_deliveries)
                await nursery.start(peer.run)
                with trio.fail_after(STAGE_SECONDS * (STAGES + 4)):
                    while len([r for r in peer.history if r.completed]) < STAGES + 1:
                        await trio.sleep(0.2)
                nursery.cancel_scope.cancel()

        try:
            trio.run(main)
        except trio.TooSlowError:
            pass  # the assertions below say what happened
    finally:
        stop.requested = True
        if advancing is not None:
            advancing.join(timeout=15)
        chain.stop()
    start_ms = peer.history[0].opened_ms if peer.history else 0
    records = [
        (r.round, "completed" if r.completed else "skipped" if r.skipped else "abandoned",
         f"{(r.opened_ms - start_ms) / 1000:.1f}..{(r.finished_ms - start_ms) / 1000:.1f} s")
        for r in peer.history
    ]  # fmt: skip
    assert peer.counters["rounds_skipped"] == 0, records
    played = [r.round for r in peer.history if r.completed]
    assert len(played) >= STAGES + 1, records
    assert played == list(range(played[0], played[0] + len(played))), records
