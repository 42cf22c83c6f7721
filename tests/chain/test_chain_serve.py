"""The embedded chain served as JSON-RPC over HTTP (swarmp2p/chain/serve.py, what `chain devnet
--backend embedded` runs): web3's HTTP client, ContractClient and the coordinator work against
it as against anvil, reverts included."""

from __future__ import annotations

import json
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.artifact import load_artifact
from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.coordinator import open_coordinator
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.errors import ChainRevert
from swarmp2p.chain.keys import load_key_file, write_key_file
from swarmp2p.chain.serve import EmbeddedRpc, EmbeddedRpcServer


@pytest.fixture  # one chain per test: a test that advances rounds must not move another's
def served() -> Iterator[tuple[EmbeddedChain, str]]:
    chain = EmbeddedChain(StageSchedule(0, 10_000, 1))
    server = EmbeddedRpcServer(EmbeddedRpc(chain.tester, chain.w3.eth.chain_id)).start()
    try:
        yield chain, server.url
    finally:
        server.stop()


def test_clients_work_over_http(served: tuple[EmbeddedChain, str], tmp_path: Path) -> None:
    from web3 import HTTPProvider, Web3

    chain, url = served
    w3 = Web3(HTTPProvider(url))
    assert w3.is_connected() and w3.eth.chain_id == chain.w3.eth.chain_id
    # A view call without a sender (web3's default, what `chain status` makes).
    plain = w3.eth.contract(address=chain.address, abi=load_artifact().abi)
    assert plain.functions.stageCount().call() == 1
    unfunded = "0x" + "12" * 20  # a read-only client's throwaway account (`chain status`)
    assert plain.functions.stageCount().call({"from": w3.to_checksum_address(unfunded)}) == 1
    manager = ContractClient(w3, chain.address, load_artifact().abi, chain.manager_account)
    key = tmp_path / "peer.key"
    write_key_file(key, secrets.token_bytes(32))
    chain.fund(load_key_file(key).address)
    peer = open_coordinator(url, chain.address, key)

    async def main() -> None:
        await peer.register("QmA")
        await peer.register("QmA")  # already ours: fine
        await peer.submit_reward(0, 0, 0.5, "QmA")
        await peer.submit_reward(0, 0, 0.5, "QmA")  # a retry: no-op
        with pytest.raises(ChainRevert, match="different value"):
            await peer.submit_reward(0, 0, 0.7, "QmA")
        with pytest.raises(ChainRevert, match="round in the future"):
            await peer.submit_reward(9, 0, 0.7, "QmA")
        await peer.submit_winners(0, ["QmA"], "QmA")
        await trio.to_thread.run_sync(manager.transact, "updateStageAndRound")
        info = await peer.current()
        assert (info.round, info.stage) == (1, 0)
        board = await peer.leaderboard()
        assert [(s.peer_id, s.score) for s in board.by_reward] == [("QmA", 0.5)]

    trio.run(main)
    with pytest.raises(ChainRevert, match="index out of range"):
        manager.call("peerAt", 5)
    status = peer.status()
    assert (status["submitted"], status["already_on_chain"], status["failed"]) == (2, 2, 1)


def test_unknown_methods_and_bad_json_are_errors_not_crashes(served: tuple[EmbeddedChain, str]) -> None:
    _, url = served

    def post(body: bytes) -> dict:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            return json.loads(error.read())

    answer = post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "debug_nope", "params": []}).encode())
    assert answer["error"]["code"] == -32601
    assert post(b"{not json")["error"]["code"] == -32700
    batch = json.dumps([{"jsonrpc": "2.0", "id": i, "method": "eth_chainId"} for i in range(2)]).encode()
    assert [a["id"] for a in post(batch)] == [0, 1]


def test_a_block_is_stamped_with_the_time_it_is_mined(served: tuple[EmbeddedChain, str]) -> None:
    """eth-tester alone stamps a block with the time its predecessor was mined: the contract's
    stageStartedAt was then the chain's previous transaction's time, and a devnet node saw each
    new stage as (nearly) over and skipped it (tests/chain/test_chain_devnet_rounds.py, end to end)."""
    from web3 import HTTPProvider, Web3

    chain, _ = served
    head_s = chain.w3.eth.get_block("latest")["timestamp"]
    now_s = [head_s + 1_000.7]  # a wall clock well past the last block
    rpc = EmbeddedRpc(chain.tester, chain.w3.eth.chain_id, now_s=lambda: now_s[0])
    server = EmbeddedRpcServer(rpc).start()
    try:
        manager = ContractClient(Web3(HTTPProvider(server.url)), chain.address, load_artifact().abi,
                                 chain.manager_account)  # fmt: skip
        manager.transact("updateStageAndRound")
        assert manager.call("roundInfo")[3] == head_s + 1_000  # stageStartedAt: whole seconds
        manager.transact("updateStageAndRound")  # the same second: timestamps still increase
        assert manager.call("roundInfo")[3] == head_s + 1_001
        now_s[0] += 60
        manager.transact("updateStageAndRound")
        assert manager.call("roundInfo")[3] == head_s + 1_060
    finally:
        server.stop()
