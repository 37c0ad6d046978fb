"""LoRA from the run form (its "Adapters (LoRA) and memory" group) and the API: rank, alpha, dropout, targets and
gradient checkpointing reach the stored config; bad values are refused on the field that set them; a stored config
without them loads as before."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from inspo_engine.config import RunConfig
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice):
    client = Client()
    client.force_login(alice)
    return client


def test_the_form_groups_the_lora_fields_and_a_run_from_it_carries_them(browser, alice_team, enqueued):
    html = browser.get(reverse("runs:new")).content.decode()
    assert 'data-testid="lora-group"' in html and 'name="lora_targets"' in html
    form = {
        "team": alice_team.pk, "name": "adapters", "preset": "smoke", "use_lora": "true", "lora_rank": 8,
        "lora_alpha": 32, "lora_dropout": 0.05, "lora_targets": "q_proj, v_proj",
    }  # fmt: skip
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    grpo = Run.objects.get().config["grpo"]
    assert (grpo["use_lora"], grpo["lora_rank"], grpo["lora_alpha"]) == (True, 8, 32)
    assert grpo["lora_dropout"] == 0.05 and grpo["lora_targets"] == ["q_proj", "v_proj"]
    assert grpo["gradient_checkpointing"] is True  # left at the preset's


def test_gradient_checkpointing_is_turned_off_from_the_form(browser, alice_team, enqueued):
    html = browser.get(reverse("runs:new")).content.decode()
    assert 'name="gradient_checkpointing"' in html and "Adapters (LoRA) and memory" in html
    form = {
        "team": alice_team.pk,
        "name": "fast",
        "preset": "smoke",
        "use_lora": "true",
        "gradient_checkpointing": "false",
    }
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert Run.objects.get().config["grpo"]["gradient_checkpointing"] is False


def test_bad_lora_values_are_refused_on_their_fields(browser, alice_team):
    form = {
        "team": alice_team.pk,
        "name": "bad",
        "preset": "smoke",
        "use_lora": "true",
        "lora_targets": "all-linear, q_proj",
    }
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 400 and not Run.objects.exists()
    assert "or [&#x27;all-linear&#x27;] alone" in response.content.decode()


def test_the_api_takes_lora_fields_and_names_a_bad_one(alice, api):
    client = api(alice)
    body = {"name": "l", "preset": "smoke", "overrides": {"grpo.use_lora": True, "grpo.lora_dropout": 1.0}}
    response = client.post("/api/v1/runs/", body, format="json")
    assert response.status_code == 400 and "grpo.lora_dropout" in response.json()["config"]
    body = {"name": "g", "preset": "smoke", "overrides": {"grpo.gradient_checkpointing": "no"}}
    response = client.post("/api/v1/runs/", body, format="json")
    assert (
        response.status_code == 400
        and "must be true or false" in response.json()["config"]["grpo.gradient_checkpointing"][0]
    )
    verl = {"backend.name": "verl", "grpo.use_lora": True, "grpo.lora_dropout": 0.1}
    response = client.post("/api/v1/runs/", {"name": "v", "preset": "smoke", "overrides": verl}, format="json")
    assert response.status_code == 400
    assert "no key for LoRA dropout" in " ".join(response.json()["config"]["grpo.lora_dropout"])


def test_a_stored_config_without_the_new_fields_loads_as_before():
    stored = RunConfig().to_dict()
    for key in ("lora_alpha", "lora_dropout", "lora_targets", "gradient_checkpointing"):
        del stored["grpo"][key]
    grpo = RunConfig.from_dict(stored).grpo
    assert (grpo.lora_alpha, grpo.lora_dropout, grpo.lora_targets) == (None, 0.0, ["all-linear"])
    assert grpo.gradient_checkpointing is True
