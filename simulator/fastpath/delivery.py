"""The simulator's world hands one instant's gossip to many fetchers at once: each envelope is
opened once for all receivers (shared_open.py) and each receiver's common case is decided by
`heard_run`; everything else takes the fetcher's usual path (`Fetcher.announced`, that is
`Inbox.heard`), in delivery order, so that every fetcher decides what one message at a time
would (tests/protocol/test_admission_many.py, tests/simulator/test_fastpath_rules.py).

The node's own `Fetcher.handle_announcement_many` is the plain loop (one message at a time);
the simulated network puts `handle_announcement_many` below in its place (`fast_handler`).
"""

from __future__ import annotations

import logging

from protocol.decisions import Fetch
from simulator.fastpath.heard_run import SLOW, Item, heard_run
from simulator.fastpath.shared_open import SharedOpen
from swarmp2p.fetcher import Fetcher
from swarmp2p.ports import InboundMessage, InlineHandler
from swarmp2p.pushed import PUSHED_PREFIX

try:  # built with heard_run's compiled loop (_hot_loops.c)
    from simulator.fastpath._hot_loops import items as _compiled_items
except ImportError:  # pragma: no cover - the list comprehension below does the same
    _compiled_items = None

__all__ = ["fast_handler", "handle_announcement_many"]

log = logging.getLogger("swarmp2p.peer")


def fast_handler(handler: InlineHandler) -> InlineHandler:
    """`handler` with a fetcher's many-receiver call replaced by the fast path's (the same
    decisions); any other handler as it is."""
    if handler.many is Fetcher.handle_announcement_many:
        return InlineHandler(handler.one, handle_announcement_many, handler.receiver)
    return handler


def _shared_item(message: InboundMessage, item_by_message: dict[int, Item]) -> Item:
    """The (sender, data, shared open) that `heard_run` takes for `message`, made once and kept
    in `item_by_message` for its other receivers. A pushed batch (swarmp2p/pushed.py) has no
    shared open: each receiver unwraps and keeps its own, on the usual path."""
    data = message.data
    shared = None if data.startswith(PUSHED_PREFIX) else SharedOpen(data)
    item = item_by_message[id(message)] = (message.transport_sender, data, shared)
    return item


def handle_announcement_many(deliveries: list[tuple[Fetcher, list[InboundMessage]]]) -> None:
    """`fetcher.handle_announcement(message)` for each fetcher and each of its messages in
    order, with each envelope opened once for all fetchers (SharedOpen): for every fetcher the
    same decisions as one message at a time. Never raises."""
    # id(message) -> (sender, data, SharedOpen or None), one tuple per message shared by all
    # its receivers: at 1000 peers this loop runs a million times a virtual round.
    item_by_message: dict[int, Item] = {}
    item_of = item_by_message.get
    items_of = _compiled_items
    for fetcher, messages in deliveries:
        if items_of is not None and type(messages) is list:
            items = items_of(messages, item_by_message, _shared_item)  # the same, in C
        else:
            items = [item_of(id(m)) or _shared_item(m, item_by_message) for m in messages]
        # The common case is decided inside `heard_run` (a deferral yields nothing); what
        # comes out is a Fetch to carry out, SLOW (the usual path, before the run goes on,
        # so each message meets the state it would have alone), or an error.
        try:
            for index, decision in heard_run(fetcher.inbox, items):
                sender, data, shared = items[index]
                try:
                    if decision is SLOW:
                        if shared is None:
                            fetcher.handle_announcement(messages[index])
                        else:
                            fetcher.announced(sender, data, shared)
                    elif type(decision) is Fetch:
                        fetcher.enqueue(decision.job)
                    else:
                        raise decision  # type: ignore[misc]  # deciding for this message failed
                except Exception:
                    log.exception("%s: handling an announcement failed", fetcher.peer_id)
                    fetcher.inbox.reject("internal_error", blame=None)
        except Exception:  # heard_run reports its own errors per item: this is a last resort
            log.exception("%s: handling announcements failed", fetcher.peer_id)
            fetcher.inbox.reject("internal_error", blame=None)
    for _, _, shared in item_by_message.values():
        if shared is not None:
            shared.settle()
