"""Sans-IO protocol core: message schemas, codec, round machine, sampling, verification, scoring.

Imports none of trio, libp2p, torch or web3 (a test enforces this). Time is an input.
"""
