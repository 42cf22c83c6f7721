"""swarmp2p/net/tcp_stall.py: which connections a timed-out request closes as stalled.

A stalled connection (data unanswered through a cut) is closed so the next request dials a
fresh one; a busy peer's connection (it answers, but reads slowly) must not be: its kernel
reports the same growing `tcpi_backoff`, from zero-window probes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netlab.netns_harness import NetnsNetwork, missing_requirements
from swarmp2p.net.tcp_stall import STALLED_EXPIRATIONS, socket_stalled, tcp_info_counts

ROOT = Path(__file__).resolve().parents[2]


def test_a_peer_that_only_reads_slowly_is_not_stalled() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.connect(server.getsockname())
    peer, _ = server.accept()  # never reads: its receive window closes
    with server, client, peer:
        client.setblocking(False)
        try:
            while True:
                client.send(b"x" * 65536)
        except BlockingIOError:
            pass  # the peer's window is zero: the kernel probes it, the peer answers each probe
        deadline = time.monotonic() + 15
        counts = tcp_info_counts(client)
        while counts is not None and counts["backoff"] < STALLED_EXPIRATIONS and time.monotonic() < deadline:
            time.sleep(0.1)
            counts = tcp_info_counts(client)
        assert counts is not None and counts["backoff"] >= STALLED_EXPIRATIONS  # what was judged before
        assert not socket_stalled(client), counts


SERVER = """
import socket, threading
server = socket.create_server(("10.77.0.2", 9000))
def serve(conn):
    with conn:
        while conn.recv(65536):
            pass
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""
# Sends a little every 0.2 s; once told (a line on stdin) that the path is cut, waits 4 s and
# prints whether its connection counts as stalled, with the kernel's counters.
CLIENT = """
import json, socket, sys, time
from swarmp2p.net.tcp_stall import socket_stalled, tcp_info_counts
conn = socket.create_connection(("10.77.0.2", 9000), timeout=10)
conn.setblocking(False)
print("connected", flush=True)
healthy = []
for _ in range(10):
    conn.send(b"x" * 100)
    time.sleep(0.2)
    healthy.append(socket_stalled(conn))
print("sending", flush=True)
sys.stdin.readline()
until = time.monotonic() + 4
while time.monotonic() < until:
    try:
        conn.send(b"x" * 100)
    except BlockingIOError:
        pass
    time.sleep(0.2)
result = {"healthy": healthy, "cut": socket_stalled(conn), "counts": tcp_info_counts(conn)}
print(json.dumps(result), flush=True)
"""


@pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))
def test_a_connection_whose_data_goes_unanswered_through_a_cut_is_stalled() -> None:
    with NetnsNetwork(2) as network:
        network.impair(delay_ms=25)
        server = subprocess.Popen([*network.exec_args(1), sys.executable, "-c", SERVER])
        try:
            time.sleep(1.0)  # listening
            client = subprocess.Popen(
                [*network.exec_args(0), sys.executable, "-c", CLIENT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            )
            assert client.stdout is not None and client.stdin is not None
            assert client.stdout.readline().strip() == "connected"
            assert client.stdout.readline().strip() == "sending"
            network.partition([0], [1])
            client.stdin.write("cut\n")
            client.stdin.flush()
            result = json.loads(client.stdout.readline())
            client.wait(timeout=30)
        finally:
            server.kill()
            server.wait()
    assert result["healthy"] == [False] * 10
    assert result["cut"] is True, result
    assert result["counts"]["retransmits"] >= STALLED_EXPIRATIONS, result
