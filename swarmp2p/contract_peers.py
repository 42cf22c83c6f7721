"""A chain node's way into its swarm without --bootstrap: the contract's bootnode list.

At start the node reads the list (swarmp2p/chain/bootnodes.py), pins every other peer's address
there like a --bootstrap peer (re-dialed with backoff), and, when its account is the contract's
bootnode manager, publishes its own listen addresses. While it has no peer it reads the list
again every `recheck_s`, so a node started before the first bootnode was listed still finds the
swarm. With --bootstrap the list is not dialed (the operator chose), but a manager still
publishes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import trio

from swarmp2p.chain.bootnodes import sync_bootnodes
from swarmp2p.ports import CoordinatorError

log = logging.getLogger("swarmp2p.node")

RECHECK_S = 10.0


class ContractBootnodes:
    def __init__(self, chain: Any, network: Any, *, dial: bool, echo: Callable[[str], None]) -> None:
        self.chain = chain
        self.network = network
        self.dial = dial
        self.echo = echo
        self.pinned: set[str] = set()
        self.publish_pending = True
        """Until one read has succeeded: then our addresses are published (or we may not)."""

    async def sync(self) -> None:
        """Read the list once (and publish when due). A chain error is one log line, not a crash:
        the chain may be down at start, and `watch` tries again."""
        try:
            sync = functools.partial(sync_bootnodes, publish=self.publish_pending)
            result = await self.chain.in_worker(
                sync, self.chain.client, self.network.local_peer_id, self.network.listen_addrs()
            )
        except CoordinatorError as error:
            log.warning("chain: cannot read the contract's bootnodes: %s", error.reason)
            return
        if self.publish_pending and result.published:
            self.echo(f"published as a bootnode on the contract: {', '.join(result.published)}")
        self.publish_pending = False
        if not self.dial:
            return
        new = [addr for addr in result.others if addr not in self.pinned]
        for addr in new:
            self.pinned.add(addr)  # a bad entry is said once, not at every re-read
            try:
                self.network.add_bootstrap(addr)
            except ValueError as error:
                log.warning("chain: skipping a bootnode on the contract: %s", error)
        if new:
            self.echo(f"bootnodes from the contract: dialing {len(new)} ({', '.join(new)})")
        elif not self.pinned:
            log.info("chain: no other peer's bootnode on the contract yet; looking every %gs", RECHECK_S)

    async def watch(self, recheck_s: float = RECHECK_S) -> None:
        """Re-read the list while it is still due or while this node has no peer, forever."""
        while True:
            await trio.sleep(recheck_s)
            if self.publish_pending or (self.dial and not self.network.connected_peers()):
                await self.sync()
