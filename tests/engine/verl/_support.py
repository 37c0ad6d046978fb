"""verl is optional: its tests skip with the reason when it is missing, unless INSPO_REQUIRE_VERL=1 (CI) says the
missing package is an error."""

from __future__ import annotations

import importlib
import os

import pytest

REQUIRED = os.environ.get("INSPO_REQUIRE_VERL") == "1"


def require_verl() -> None:
    """Call at the top of a test module, before importing anything that needs verl."""
    try:
        importlib.import_module("verl.experimental.agent_loop.agent_loop")
    except ImportError as error:
        reason = (
            f"verl is not importable ({error}); install it with `pip install -r requirements/verl.txt` and "
            "`pip install --no-deps verl==0.9.1`"
        )
        if REQUIRED:
            pytest.fail(f"INSPO_REQUIRE_VERL=1 but {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
