"""The simulator's fast delivery path: the admission rules' common case decided for many
receivers in one process, on the simulator's memory-saving structures.

    heard_run     a run of gossip messages for one receiver: its common case decided, the rest
                  handed back (SLOW) for `Inbox.heard`; its inner loop in C (_hot_loops.c)
    delivery      one instant's gossip to many fetchers (the simulated network's InlineHandler)
    shared_open   one message opened once for all its receivers
    peer_sets     one shared set of online peers, viewed without `me` by each peer

The rules themselves are protocol/admission.py's: tests/simulator/test_fastpath_rules.py holds
`heard_run` (C and Python) to `Inbox.heard` + `consider`, decision by decision.
"""
