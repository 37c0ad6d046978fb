"""Run pages: the submission form (engine errors next to their field), the list, detail and trajectory pages."""

from __future__ import annotations

import re

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


def field_errors(html: str, field: str) -> str:
    """The text of the form row holding `field`."""
    match = re.search(rf'<label for="id_{field}">.*?</div>', html, re.S)
    assert match, f"no row for {field}"
    return match.group(0)


def test_the_form_submits_a_preset_with_changes(browser, alice_team, enqueued, django_capture_on_commit_callbacks):
    form = {"team": alice_team.pk, "name": "from the form", "tags": "ui, smoke", "preset": "smoke", "lr": "2e-6"}
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(reverse("runs:new"), form)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", kwargs={"run_id": run.pk})
    assert run.config["grpo"]["lr"] == 2e-6 and sorted(t.name for t in run.tags.all()) == ["smoke", "ui"]
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "cpu")]


def test_engine_errors_appear_next_to_their_field_and_nothing_is_submitted(browser, alice_team, enqueued):
    form = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "group_size": "1", "overrides": '{"top_k": 0}'}
    response = browser.post(reverse("runs:new"), form)
    html = response.content.decode()
    assert response.status_code == 400
    assert "must be ≥ 2 and ≤ 64, got 1" in field_errors(html, "group_size")
    assert "env.top_k: must be ≥ 1" in field_errors(html, "overrides")
    assert not Run.objects.exists() and enqueued == []


def test_the_form_rejects_broken_json(browser, alice_team):
    form = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "overrides": "{oops"}
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 400 and "not valid JSON" in field_errors(response.content.decode(), "overrides")


def test_detail_and_trajectory_pages_show_the_run(browser, scripted_run):
    detail = browser.get(reverse("runs:detail", kwargs={"run_id": scripted_run.pk})).content.decode()
    assert scripted_run.best_instruction.key in detail and "Evolution rounds" in detail and "sha256" in detail
    trajectories = browser.get(reverse("runs:trajectories", kwargs={"run_id": scripted_run.pk}), {"step": "2"})
    assert trajectories.status_code == 200 and "reward" in trajectories.content.decode()


def test_the_list_filters_by_status(browser, scripted_run):
    assert scripted_run.name in browser.get(reverse("runs:list"), {"status": "finished"}).content.decode()
    assert scripted_run.name not in browser.get(reverse("runs:list"), {"status": "queued"}).content.decode()
