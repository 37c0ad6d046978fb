"""Nothing here reaches a broker unless a test asks for one: enqueued tasks are recorded instead."""

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _record_instead_of_sending(enqueued: Any) -> None:
    """Every test here records what it would enqueue (see the `enqueued` fixture)."""
