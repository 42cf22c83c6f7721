"""The contract's bootnode list as a node sees it: the other peers' addresses to dial, and,
when this node's account is the contract's bootnode manager, its own addresses published there.

Synchronous (a ContractClient): run it on the coordinator's serialized worker
(`ChainCoordinator.in_worker`). A node's own entries are recognised by their `/p2p/<peer id>`
suffix, so a restart on another port replaces its stale addresses instead of piling them up
(the contract holds at most 64, and a stale one costs every joiner a failed dial).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from swarmp2p.chain.client import ContractClient

MAX_PUBLISHED = 4
"""Own addresses published at most (a wildcard listen address expands to one per interface;
each entry costs gas, and the contract's list is shared by the whole swarm)."""


@attrs.frozen
class BootnodeSync:
    others: tuple[str, ...]
    """Listed addresses of other peers (not ending in our /p2p/<peer id>)."""
    manager: bool
    """Whether our account is the contract's bootnode manager (may add and remove)."""
    published: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def sync_bootnodes(
    client: ContractClient, peer_id: str, own_addrs: Sequence[str], *, publish: bool = True
) -> BootnodeSync:
    """Read the list; as the bootnode manager (and `publish`), remove our listed addresses that
    are not in `own_addrs` and add those of `own_addrs` (full multiaddrs, ending in our
    /p2p/<peer id>) that are missing. Raises ChainError like any client call."""
    listed = [str(addr) for addr in client.call("getBootnodes")]
    suffix = f"/p2p/{peer_id}"
    others = tuple(addr for addr in listed if not addr.endswith(suffix))
    manager = str(client.call("bootnodeManager")).lower() == client.account.address.lower()
    if not (manager and publish):
        return BootnodeSync(others, manager)
    wanted = [addr for addr in own_addrs if addr.endswith(suffix)][:MAX_PUBLISHED]
    stale = [index for index, addr in enumerate(listed) if addr.endswith(suffix) and addr not in wanted]
    # Highest index first: removeBootnode moves the last entry into the freed place, and every
    # entry after `index` has been looked at already.
    for index in sorted(stale, reverse=True):
        client.transact("removeBootnode", index)
    missing = [addr for addr in wanted if addr not in listed]
    if missing:
        client.transact("addBootnodes", missing)
    return BootnodeSync(others, manager, tuple(missing), tuple(listed[i] for i in stale))
