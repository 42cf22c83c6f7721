"""The libp2p adapter of the NetworkPort (py-libp2p 0.8.1 on trio)."""

from swarmp2p.net.adapter import LibP2PNetwork, open_libp2p_network
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.peer_addrs import parse_peer_multiaddr
from swarmp2p.net.peer_exchange import PEERS_PROTOCOL
from swarmp2p.net.request_response import FETCH_PROTOCOL, HELLO_PROTOCOL
from swarmp2p.net.settings import NetworkSettings

__all__ = [
    "FETCH_PROTOCOL",
    "HELLO_PROTOCOL",
    "PEERS_PROTOCOL",
    "DropCounters",
    "LibP2PNetwork",
    "NetworkSettings",
    "open_libp2p_network",
    "parse_peer_multiaddr",
]
