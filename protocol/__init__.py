"""Sans-IO protocol core: message schemas, codec, round machine, sampling, verification, scoring.

Imports none of trio, libp2p, torch or web3 (a test enforces this). Time is an input.

    messages      wire schemas (attrs classes)          limits        every wire bound, in one place
    codec         msgpack encode / strict decode         envelope      Ed25519-signed envelopes, peer ids
    errors        ProtocolError(reason, message)         rounds        the per-peer round machine
    questions     deterministic question assignment      sampling      choosing L local + E external groups
    verification  re-scoring a peer's batch              scoring       per-peer valid/invalid counts, bans
    tasks         the TaskRegistry port                  admission     which batches to fetch / accept
    game          questions, verification per stage      seeds         deterministic seeds (sha256)
    decisions     the inbox's Fetch, Defer, Reject ...   deferred      sampled-out batches kept for top-ups
    fetch_draw    the one fetch draw (sampled fetching)  sender_map    per-sender maps as lists by peer number
    games         the game registry, a GameSpec a game   staged        later stages built on earlier batches
    acr           answer -> critique -> resolve game     answer_verify answer -> verify game
    stage_inputs  InputRef, InputStore, StageItem        inputs        admitting a later stage's inputs
    stage_schedule round and stage from a clock reading  logprobs      sampling log-probs on the wire

The admission rules are written once, in admission.py (`Inbox.heard`, `consider`, `fetched`):
the simulator's fast delivery path that decides their common case for many peers in one
process lives in simulator/fastpath/ and is held to them by tests/simulator/test_fastpath_rules.py.
"""
