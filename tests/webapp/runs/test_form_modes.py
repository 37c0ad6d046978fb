"""The run form offers every run mode the engine knows, random-pool included."""

from typing import get_args

from inspo_engine.config import Mode
from webapp.runs.forms import RunForm


def test_the_run_form_offers_every_engine_mode():
    offered = {value for value, _ in RunForm.base_fields["mode"].choices if value}
    assert offered == set(get_args(Mode))
    assert "random-pool" in offered
