"""Doctest collection of this package: the modules that import verl are skipped when verl is not installed (the
tests in tests/engine/verl say why, or fail under INSPO_REQUIRE_VERL=1)."""

import importlib.util
import os

NEEDS_VERL = ["advantage.py", "agent_loop.py", "config.py", "trainer.py"]

collect_ignore = (
    NEEDS_VERL if importlib.util.find_spec("verl") is None and os.environ.get("INSPO_REQUIRE_VERL") != "1" else []
)
