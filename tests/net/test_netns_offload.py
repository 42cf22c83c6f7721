"""The harness switch's TCP segmentation offload: an offloaded packet stands for several
MTU-sized segments, loss is drawn per segment, and a packet that lost some is cut into the
runs that survive, each a packet the receiving kernel would have made of them.

The pure part needs nothing; the transfer at the end needs root, iproute2 and /dev/net/tun."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netlab.netns_harness import (
    TCP_CWR,
    TCP_FIN,
    TCP_PSH,
    VNET,
    NetnsNetwork,
    _ipv4_checksum,
    gso_segments,
    missing_requirements,
    surviving_runs,
    wire_bytes,
)

GSO_TCPV4 = 1
NEEDS_CSUM = 1
SEQUENCE = 4_294_960_000  # wraps inside a packet of a few segments


def offloaded_packet(payload: bytes, mss: int, flags: int = TCP_PSH | TCP_FIN | TCP_CWR | 0x10) -> bytes:
    """A TSO packet as a node's kernel hands it to the switch: virtio-net header, IPv4, TCP
    (with 12 bytes of options), `payload` to be cut into `mss`-byte segments."""
    tcp = bytearray(32)
    tcp[0:2], tcp[2:4] = (40000).to_bytes(2, "big"), (9000).to_bytes(2, "big")
    tcp[4:8] = SEQUENCE.to_bytes(4, "big")
    tcp[12] = (32 // 4) << 4
    tcp[13] = flags
    ip = bytearray(20)
    ip[0], ip[8], ip[9] = 0x45, 64, 6
    ip[2:4] = (20 + 32 + len(payload)).to_bytes(2, "big")
    ip[4:6] = (0xFFFE).to_bytes(2, "big")
    ip[12:16], ip[16:20] = bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2])
    ip[10:12] = _ipv4_checksum(ip).to_bytes(2, "big")
    several = len(payload) > mss
    gso = (GSO_TCPV4, 52, mss) if several else (0, 0, 0)
    vnet = VNET.pack(NEEDS_CSUM, *gso, 20, 16)
    return vnet + bytes(ip) + bytes(tcp) + payload


def parse(packet: bytes) -> dict[str, object]:
    _, gso_type, _, gso_size, csum_start, csum_offset = VNET.unpack_from(packet)
    ip = packet[VNET.size :]
    return {
        "gso": (gso_type, gso_size),
        "csum": (csum_start, csum_offset),
        "ip_total": int.from_bytes(ip[2:4], "big"),
        "ip_id": int.from_bytes(ip[4:6], "big"),
        "ip_checksum_ok": _ipv4_checksum(ip[:20]) == 0,
        "seq": int.from_bytes(ip[24:28], "big"),
        "flags": ip[33],
        "payload": ip[52:],
        "length": len(ip),
    }


def test_a_packet_that_lost_its_second_segment_becomes_two() -> None:
    payload = bytes(range(256)) * 14  # 3,584 bytes: four segments of 1,000, the last 584
    packet = offloaded_packet(payload, 1000)
    assert gso_segments(packet) == 4
    first, rest = (parse(p) for p in surviving_runs(packet, [False, True, False, False]))
    # The first segment alone: no longer offloaded, CWR kept, FIN and PSH left to the last.
    assert first["gso"] == (0, 0) and first["payload"] == payload[:1000]
    assert first["seq"] == SEQUENCE and first["ip_total"] == first["length"] == 1052
    assert first["flags"] == TCP_CWR | 0x10 and first["ip_checksum_ok"]
    # Segments 3 and 4: still one offloaded packet, 2,000 bytes further on (wrapping), FIN kept.
    assert rest["gso"] == (GSO_TCPV4, 1000) and rest["payload"] == payload[2000:]
    assert rest["seq"] == (SEQUENCE + 2000) % 2**32 and rest["ip_total"] == rest["length"] == 52 + 1584
    assert rest["flags"] == TCP_FIN | TCP_PSH | 0x10 and rest["ip_checksum_ok"]
    assert rest["ip_id"] == (0xFFFE + 2) & 0xFFFF and rest["csum"] == (20, 16)


def test_a_bandwidth_limit_counts_every_segments_headers() -> None:
    packet = offloaded_packet(bytes(3584), 1000)  # four segments, 52 bytes of headers each
    assert wire_bytes(packet, offloaded=True) == 3584 + 4 * 52
    assert wire_bytes(offloaded_packet(bytes(300), 1000), offloaded=True) == 300 + 52
    assert wire_bytes(b"x" * 1500, offloaded=False) == 1500


def test_a_packet_of_one_segment_is_one_segment() -> None:
    assert gso_segments(offloaded_packet(b"x" * 300, 1000)) == 1
    assert surviving_runs(offloaded_packet(b"x" * 300, 1000), [True]) == []


@given(
    mss=st.integers(min_value=100, max_value=1460),
    size=st.integers(min_value=1, max_value=20_000),
    data=st.data(),
)
def test_the_runs_carry_exactly_the_surviving_segments(mss: int, size: int, data: st.DataObject) -> None:
    payload = bytes(i * 7 % 251 for i in range(size))
    packet = offloaded_packet(payload, mss)
    count = gso_segments(packet)
    assert count == -(-size // mss)
    lost = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    runs = [parse(p) for p in surviving_runs(packet, lost)]
    received: dict[int, bytes] = {}
    for run in runs:
        assert run["ip_checksum_ok"] and run["ip_total"] == run["length"]
        offset = (run["seq"] - SEQUENCE) % 2**32  # type: ignore[operator]
        assert offset % mss == 0
        body = run["payload"]
        assert isinstance(body, bytes)
        pieces = -(-len(body) // mss)
        assert run["gso"] == ((GSO_TCPV4, mss) if pieces > 1 else (0, 0))
        for k in range(pieces):
            received[offset // mss + k] = body[k * mss : (k + 1) * mss]
        last = offset // mss + pieces == count
        assert bool(run["flags"] & TCP_FIN) == last and bool(run["flags"] & TCP_CWR) == (offset == 0)  # type: ignore[operator]
    assert sorted(received) == [i for i in range(count) if not lost[i]]
    assert all(received[i] == payload[i * mss : (i + 1) * mss] for i in received)
    assert len(runs) == sum(1 for i in range(count) if not lost[i] and (i == 0 or lost[i - 1]))


SINK = """
import hashlib, socket
server = socket.create_server(("10.77.0.2", 9000))
conn, _ = server.accept()
digest, total = hashlib.sha256(), 0
while chunk := conn.recv(1 << 20):
    digest.update(chunk)
    total += len(chunk)
print(total, digest.hexdigest(), flush=True)
"""
SOURCE = """
import socket, sys, time
data = bytes(i * 31 % 253 for i in range(int(sys.argv[1])))
for _ in range(100):
    try:
        conn = socket.create_connection(("10.77.0.2", 9000), timeout=2)
        break
    except OSError:
        time.sleep(0.1)
conn.sendall(data)
conn.close()
"""


@pytest.mark.slow
@pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))
def test_four_megabytes_cross_a_lossy_offloaded_link_intact() -> None:
    with NetnsNetwork(2) as network:
        network.impair(delay_ms=10, loss=0.03)
        sink_args = [*network.exec_args(1), sys.executable, "-c", SINK]
        sink = subprocess.Popen(sink_args, stdout=subprocess.PIPE, text=True)
        subprocess.run(
            [*network.exec_args(0), sys.executable, "-c", SOURCE, "4000000"], check=True, timeout=120
        )
        out, _ = sink.communicate(timeout=60)
        expected = hashlib.sha256(bytes(i * 31 % 253 for i in range(4_000_000))).hexdigest()
        assert out.split() == ["4000000", expected]
        sent = network.stats()[0]
        # Offloaded: fewer packets than segments; loss drawn per segment, and some were cut.
        assert sent["dropped_loss"] > 0 and sent["packets"] < sent["forwarded"] / 2, sent
        assert sent["forwarded"] >= 4_000_000 // 1448, sent


@pytest.mark.slow
@pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))
def test_a_bandwidth_limit_holds_for_offloaded_packets() -> None:
    """At 4 Mbit/s one megabyte (plus a header per 1448-byte segment) needs at least 2.05 s on
    the wire, however large the packets the switch reads."""
    with NetnsNetwork(2) as network:
        network.impair(delay_ms=5, rate_kbit=4000)
        sink_args = [*network.exec_args(1), sys.executable, "-c", SINK]
        sink = subprocess.Popen(sink_args, stdout=subprocess.PIPE, text=True)
        started = time.monotonic()
        subprocess.run(
            [*network.exec_args(0), sys.executable, "-c", SOURCE, "1000000"], check=True, timeout=60
        )
        out, _ = sink.communicate(timeout=60)
        took = time.monotonic() - started
        assert out.split()[0] == "1000000"
        assert 2.05 <= took < 10, took
        sent = network.stats()[0]
        assert sent["packets"] < sent["forwarded"], sent  # offloaded, and still limited
