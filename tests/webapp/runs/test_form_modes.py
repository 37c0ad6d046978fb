"""The run form offers every value the engine knows for its choice fields: every run mode (random-pool included),
loss, proposer, optimizer provider and backend, read from the config's `Literal` types."""

from typing import get_args, get_type_hints

import pytest

from inspo_engine.config import BackendConfig, GRPOLoss, Mode, OptimizerConfig, Proposer
from webapp.runs.forms import RunForm


def _offered(field: str) -> list[str]:
    return [value for value, _ in RunForm.base_fields[field].choices if value]


def test_the_run_form_offers_every_engine_mode():
    offered = set(_offered("mode"))
    assert offered == set(get_args(Mode))
    assert "random-pool" in offered


@pytest.mark.parametrize(
    ("field", "literal"),
    [
        ("mode", Mode),
        ("loss", GRPOLoss),
        ("proposer", Proposer),
        ("optimizer_provider", get_type_hints(OptimizerConfig)["provider"]),
        ("backend", get_type_hints(BackendConfig)["name"]),
    ],
)
def test_each_choice_field_offers_the_literals_args_in_their_order(field, literal):
    assert _offered(field) == list(get_args(literal))
    assert RunForm.base_fields[field].choices[0] == ("", "(preset)")
