"""Doctest collection of the engine's top level: the verl job imports verl at module level, so it is skipped when verl
is not installed, as `backends/verl/conftest.py` skips that package's modules (tests/engine/verl says why, or fails
under INSPO_REQUIRE_VERL=1)."""

import importlib.util
import os

NEEDS_VERL = ["verl_job.py"]

collect_ignore = (
    NEEDS_VERL if importlib.util.find_spec("verl") is None and os.environ.get("INSPO_REQUIRE_VERL") != "1" else []
)
