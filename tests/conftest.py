"""Hypothesis profiles for the whole suite.

- `ci` (the default): what a plain `pytest` and CI run, sized so the suite stays fast on 2 cores.
- `deep`: thousands of examples per property, for a long run before a release or after a change
  to the protocol (`pytest --hypothesis-profile=deep tests/test_protocol_*.py`).

Choose with hypothesis' own `--hypothesis-profile=NAME` option or the `HYPOTHESIS_PROFILE`
environment variable (the option wins). Tests do not hard-code example counts: a property whose
examples are expensive (a whole simulated swarm, a real chain) asks for a share of the
profile's count with `budget.examples(share)`, so `deep` runs it deeper too.

No deadline anywhere: these machines are shared and a slow example is not a failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}

settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("deep", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: object) -> None:
    """Commands under test (`swarmp2p node`, `train`, their subprocesses) cache built models per user
    (`trainer.config.user_model_cache`); point that cache at one folder per test session so tests
    never write to the user's own cache, and still build each model once per session."""
    # Popped: a SWARMP2P_* variable that names no setting is a config error in every command the
    # tests start (it reached their environment and they all failed).
    if os.environ.pop("SWARMP2P_TEST_KEEP_CACHE", None) is None:
        import tempfile

        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="swarmp2p-test-cache-")
