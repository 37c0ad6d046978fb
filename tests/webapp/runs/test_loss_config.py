"""The loss variants through the runs API: each one is accepted on the backend that can honour it; a choice a
backend cannot honour, or an unknown variant, is a 400 naming the field."""

from __future__ import annotations

import pytest

from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_each_loss_variant_is_stored_with_the_run(alice, api, variant):
    overrides = {"grpo.loss": variant, "grpo.clip_ratio_high": 0.28}
    response = api(alice).post(RUNS, {"name": variant, "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["grpo"]["loss"] == variant
    assert response.json()["config"]["grpo"]["clip_ratio_high"] == 0.28


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"grpo.scale_rewards": "batch"}, "grpo.scale_rewards", "torch backend only"),
        ({"grpo.drop_truncated": True}, "grpo.drop_truncated", "torch backend only"),
        ({"grpo.loss": "ppo"}, "grpo.loss", "must be one of"),
    ],
)
def test_a_variant_the_backend_cannot_honour_is_a_400_naming_it(alice, api, overrides, field, message):
    body = {"name": "verl run", "preset": "paper", "overrides": overrides}
    response = api(alice).post(RUNS, body, format="json")
    assert response.status_code == 400, response.json()
    assert message in response.json()["config"][field][0], response.json()
    assert not Run.objects.exists()
