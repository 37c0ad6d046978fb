"""The run form offers the GRPO loss and the trackers with their choices, and a run started from it carries them."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice):
    client = Client()
    client.force_login(alice)
    return client


def test_the_form_shows_the_loss_and_tracker_choices(browser):
    html = browser.get(reverse("runs:new")).content.decode()
    for choice in ("dr_grpo", "dapo", "gspo", 'value="mlflow"', 'value="wandb"', 'value="tensorboard"'):
        assert choice in html


def test_a_run_from_the_form_carries_its_loss_and_trackers(browser, alice_team, enqueued):
    form = {
        "team": alice_team.pk,
        "name": "tracked",
        "preset": "smoke",
        "loss": "dr_grpo",
        "tracking": ["tensorboard", "mlflow"],
    }
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    config = Run.objects.get().config
    assert config["grpo"]["loss"] == "dr_grpo" and config["tracking"]["backends"] == ["tensorboard", "mlflow"]


def test_a_run_from_the_form_without_trackers_keeps_none(browser, alice_team, enqueued):
    form = {"team": alice_team.pk, "name": "plain", "preset": "smoke"}
    assert browser.post(reverse("runs:new"), form).status_code == 302
    config = Run.objects.get().config
    assert config["tracking"]["backends"] == [] and config["grpo"]["loss"] == "grpo"
