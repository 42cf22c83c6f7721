"""Sans-IO protocol core: message schemas, codec, round machine, sampling, verification, scoring.

Imports none of trio, libp2p, torch or web3 (a test enforces this). Time is an input.

    messages      wire schemas (attrs classes)          limits        every wire bound, in one place
    codec         msgpack encode / strict decode         envelope      Ed25519-signed envelopes, peer ids
    errors        ProtocolError(reason, message)         rounds        the per-peer round machine
    questions     deterministic question assignment      sampling      choosing L local + E external groups
    verification  re-scoring a peer's batch              scoring       per-peer valid/invalid counts, bans
    tasks         the TaskRegistry port                  admission     which batches to fetch / accept
    game          questions, verification per stage      seeds         deterministic seeds (sha256)
"""
