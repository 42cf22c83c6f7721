"""Peer ids and multiaddrs as the adapter reads them from strangers: parsing that never raises
on garbage (peer exchange answers, hellos, the command line), cached where every answer
repeats the same names, and the wildcard listen addresses turned into dialable ones."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import multiaddr
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.utils.address_validation import expand_wildcard_address


def parse_peer_multiaddr(text: str) -> tuple[str, str]:
    """'/ip4/1.2.3.4/tcp/5/p2p/Qm..' -> (peer id, address without /p2p). Raises ValueError."""
    try:
        info = info_from_p2p_addr(multiaddr.Multiaddr(text))
    except Exception as error:
        raise ValueError(f"not a peer multiaddr (need .../p2p/<peer id>): {text!r}: {error}") from error
    return info.peer_id.to_base58(), str(info.addrs[0]) if info.addrs else ""


def valid_addr(text: Any) -> bool:
    """A multiaddr string of sane length (what a peer exchange entry may list)."""
    if not isinstance(text, str) or len(text) > 256:
        return False
    return _parses_as_multiaddr(text)


@functools.lru_cache(maxsize=4096)
def _parses_as_multiaddr(text: str) -> bool:
    # Cached: every peer exchange answer lists the same addresses again, and parsing one
    # (multiaddr + netaddr, pure Python) was ~8% of an idle node's busy samples (20 processes).
    try:
        multiaddr.Multiaddr(text)
    except Exception:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def base58_of(raw: bytes) -> str:
    """A peer id's base58 name from its bytes. Cached: every gossip message names its origin
    as bytes, the validator and the pump each need the name, and base58 is pure Python (~14 us,
    ~1.4% of a delivery each time); a swarm has few origins."""
    return ID(raw).to_base58()


def parse_peer_id(text: Any) -> ID | None:
    """A base58 peer id -> ID, or None for anything else (never raises)."""
    if not isinstance(text, str) or len(text) > 128:
        return None
    return _parse_base58_peer_id(text)


@functools.lru_cache(maxsize=4096)
def _parse_base58_peer_id(text: str) -> ID | None:
    # Cached: every peer exchange answer lists the same few dozen ids again, and the base58
    # package decodes in pure Python (~8% of an idle node's busy samples, 20 processes).
    try:
        return ID.from_base58(text)
    except Exception:
        return None


def dialable_addrs(addrs: Sequence[Any]) -> list[str]:
    """Transport multiaddrs with wildcard hosts expanded to concrete interface addresses
    (py-libp2p's own expansion), /p2p suffixes removed, order kept, duplicates dropped."""
    dialable: list[str] = []
    for addr in addrs:
        ma = multiaddr.Multiaddr(str(addr))
        if multiaddr.protocols.P_P2P in {protocol.code for protocol in ma.protocols()}:
            ma = ma.decapsulate_code(multiaddr.protocols.P_P2P)
        first = ma.protocols()[0]
        wildcard = first.code in _IP_CODES and ma.value_for_protocol(first.code) in ("0.0.0.0", "::")
        for concrete in expand_wildcard_address(ma) if wildcard else [ma]:
            text = str(concrete)
            if wildcard and text == str(ma):  # no interface found: only this host can dial it
                text = text.replace("/ip4/0.0.0.0/", "/ip4/127.0.0.1/").replace("/ip6/::/", "/ip6/::1/")
            if text not in dialable:
                dialable.append(text)
    return dialable


_IP_CODES = (multiaddr.protocols.P_IP4, multiaddr.protocols.P_IP6)
