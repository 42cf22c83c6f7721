"""GRPO trainer on reasoning-gym tasks (torch + transformers). Synchronous API, no networking."""
