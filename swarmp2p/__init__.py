"""swarmp2p: a peer-to-peer swarm that post-trains language models with GRPO."""

__version__ = "0.1.0"
