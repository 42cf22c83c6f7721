"""Interop: a js-libp2p peer joins a swarmp2p node's gossip topic and DHT namespace.

Needs Node.js and `npm install --prefix interop/js` (done by .ci/run). When either is missing the
test FAILS with a message saying what to run: a skipped interop test would hide missing work.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from protocol.envelope import open_envelope, seal
from protocol.messages import (
    Completion,
    QuestionGroup,
    QuestionRef,
    RolloutAnnouncement,
    RolloutBatch,
)
from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.peer import announce_topic, batch_dht_key

JS_DIR = Path(__file__).resolve().parents[2] / "interop" / "js"
SWARM = "interop-swarm"


def _require_js() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "Node.js is not installed: install node >= 20, then run `npm install --prefix interop/js`"
        )
    for package in ("libp2p", "@libp2p/gossipsub", "@libp2p/kad-dht", "@chainsafe/libp2p-noise"):
        if not (JS_DIR / "node_modules" / package / "package.json").exists():
            pytest.fail(f"npm package {package} is missing: run `npm install --prefix interop/js`")
    return node


class JsPeer:
    """The js peer as a child process speaking JSON lines."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""
        self.messages: list[dict[str, Any]] = []
        self.logs: list[str] = []  # the js peer's own diagnostics, shown when an assertion fails

    async def event(self, name: str) -> dict[str, Any]:
        """The next event called `name`; gossip messages met on the way are kept in `messages`."""
        assert self.process.stdout is not None
        while True:
            while b"\n" not in self._buffer:
                data = await self.process.stdout.receive_some(65536)
                if not data:
                    raise AssertionError(f"js peer exited (code {self.process.poll()}) before {name!r}")
                self._buffer += data
            line, self._buffer = self._buffer.split(b"\n", 1)
            event = json.loads(line)
            if event["event"] == "message":
                self.messages.append(event)
            if event["event"] in ("log", "error"):
                self.logs.append(event["message"])
            if event["event"] == name:
                return event

    async def command(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(text.encode() + b"\n")


def _signed_batch(seed: bytes, peer_id: str) -> tuple[bytes, bytes]:
    batch = RolloutBatch(
        swarm_id=SWARM,
        round=3,
        stage=0,
        peer_id=peer_id,
        groups=(
            QuestionGroup(
                question=QuestionRef(task="basic_arithmetic", dataset_seed=7, index=1),
                completions=(Completion(text="<answer>4</answer>", reward=1.0),),
            ),
        ),
    )
    envelope = seal(batch, seed)
    announcement = RolloutAnnouncement(
        swarm_id=SWARM,
        round=3,
        stage=0,
        peer_id=peer_id,
        batch_digest=hashlib.sha256(envelope).digest(),
        group_count=1,
        size_bytes=len(envelope),
    )
    return seal(announcement, seed), envelope


@pytest.mark.slow
def test_js_libp2p_peer_gets_announcement_and_dht_record() -> None:
    node = _require_js()
    seed = bytes(range(32))
    key_pair = create_new_key_pair(seed)
    topic = announce_topic(SWARM)

    async def main() -> None:
        with trio.fail_after(90):
            async with open_libp2p_network(key_pair, NetworkSettings()) as py:
                announcement, envelope = _signed_batch(seed, py.local_peer_id)
                dht_key = batch_dht_key(SWARM, 3, 0, py.local_peer_id)
                await py.dht_put(dht_key, envelope)
                inbound = await py.subscribe(topic)

                process = await trio.lowlevel.open_process(
                    [node, str(JS_DIR / "peer.mjs"), "--connect", py.listen_addrs()[0], "--topic", topic],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                js = JsPeer(process)
                try:
                    ready = await js.event("ready")
                    js_peer_id = ready["peer_id"]
                    assert ready["routing_table_size"] >= 1, (
                        f"js Kademlia never added the swarmp2p node; js said: {js.logs}"
                    )

                    # 1. Gossip py -> js: the swarm's signed announcement arrives byte for byte.
                    with trio.fail_after(30):
                        while not js.messages:
                            await py.publish(topic, announcement)
                            with trio.move_on_after(1.0):
                                await js.event("message")
                    message = js.messages[0]
                    assert message["topic"] == topic
                    assert message["from"] == py.local_peer_id  # strict signing both sides
                    received = bytes.fromhex(message["data_hex"])
                    assert received == announcement
                    assert open_envelope(received).signer == py.local_peer_id

                    # 2. DHT py -> js: the signed batch record, fetched through js's Kademlia.
                    await js.command(f"get {dht_key}")
                    got = await js.event("get")
                    assert got["found"], f"js peer could not get the swarmp2p record; js said: {js.logs}"
                    assert bytes.fromhex(got["value_hex"]) == envelope

                    # 3. DHT js -> py and gossip js -> py.
                    await js.command(f"put /swarmp2p/{SWARM}/from-js {b'js-record'.hex()}")
                    assert (await js.event("put"))["ok"], f"js put failed; js said: {js.logs}"
                    assert await py.dht_get(f"{SWARM}/from-js") == b"js-record"
                    await js.command(f"publish {topic} {b'hi from js'.hex()}")
                    await js.event("published")
                    with trio.fail_after(10):
                        back = await inbound.receive()
                    assert back.data == b"hi from js"
                    assert back.transport_sender == js_peer_id

                    await js.command("quit")
                    with trio.fail_after(10):
                        await process.wait()
                finally:
                    if process.returncode is None:
                        process.kill()

    trio.run(main)
