"""Instruction × checkpoint heatmaps through the API and the run page: what a request evaluates (named or top-k
instructions, living or pruned; checkpoints on disk), its cost and bounds (400s that name them), a run without
checkpoints (409), roles (viewers read, members act), team isolation (another team's run, heatmap or cell is a
404), the grid and a cell's answers as the worker stores them, the timeline notes, and the sweep."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import (
    CheckpointFactory,
    InstructionFactory,
    PopulationMemberFactory,
    PopulationSnapshotFactory,
    RunFactory,
)
from webapp.runs import lifecycle
from webapp.runs.models import Heatmap, HeatmapCell, Run, RunNote

pytestmark = pytest.mark.django_db

TASK = "workers.tasks.evaluate_heatmap"


def heatmaps_url(run):
    return f"/api/v1/runs/{run.pk}/heatmaps/"


@pytest.fixture
def run(alice, alice_team):
    """A run of alice's team: four instructions (three in the latest population, weights 0.9, 0.6, 0.3; one pruned
    at step 2 with weight 0.1), checkpoints of steps 2 and 4 on disk and one of step 6 deleted."""
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, step=6, total_steps=6)
    seed = InstructionFactory(run=run, key="ins-0000", text="Search, then answer.")
    pruned = InstructionFactory(run=run, key="ins-0001", birth_step=0, retired_step=2, retired_weight=0.1)
    early = PopulationSnapshotFactory(run=run, step=1)
    PopulationMemberFactory(snapshot=early, instruction=pruned, weight=0.1)
    PopulationMemberFactory(snapshot=early, instruction=seed, weight=0.2)
    latest = PopulationSnapshotFactory(run=run, step=6)
    for key, weight in (("ins-0002", 0.3), ("ins-0003", 0.9)):
        PopulationMemberFactory(snapshot=latest, instruction__run=run, instruction__key=key, weight=weight)
    PopulationMemberFactory(snapshot=latest, instruction=seed, weight=0.6)
    for step, available in ((2, True), (4, True), (6, False)):
        CheckpointFactory(run=run, step=step, available=available)
    return run


def post(client, run, **body):
    return client.post(heatmaps_url(run), body, format="json")


def test_by_default_the_heaviest_instructions_meet_every_checkpoint_on_disk(
    run, alice, api, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(alice), run, sample_size=20, sample_seed=3)
    assert response.status_code == 202, response.json()
    body = response.json()
    assert [row["id"] for row in body["rows"]] == ["ins-0003", "ins-0000", "ins-0002", "ins-0001"]
    assert [row["retired_step"] for row in body["rows"]] == [None, None, None, 2]  # the pruned one too
    assert [column["step"] for column in body["columns"]] == [2, 4]  # step 6's checkpoint is gone
    assert body["status"] == "queued" and body["cells_total"] == 8 and body["cells_done"] == 0
    assert body["answers"] == 8 * 20 and body["benchmark"] == "builtin" and body["sample_seed"] == 3
    assert all(cell["em"] is None and not cell["done"] for cell in body["cells"])
    assert [(c["instruction_id"], c["step"]) for c in body["cells"][:2]] == [("ins-0003", 2), ("ins-0003", 4)]
    assert enqueued == [(TASK, [body["id"]], "cpu")]
    note = RunNote.objects.get(run=run, kind="heatmap_requested")
    assert note.step == 4 and note.payload["heatmap_id"] == body["id"] and note.payload["by"] == "alice"
    assert note.payload["answers"] == 160 and note.payload["steps"] == [2, 4]


def test_named_instructions_are_rows_in_the_order_asked_and_named_steps_are_columns(run, mia, api):
    response = post(api(mia), run, instructions=["ins-0001", "ins-0003"], steps=[4], top_k=1)
    assert response.status_code == 202, response.json()
    body = response.json()
    assert [row["id"] for row in body["rows"]] == ["ins-0001", "ins-0003"]
    assert [column["step"] for column in body["columns"]] == [4] and body["sample_size"] == 50
    assert body["requested_by"] == "mia"


def test_top_k_chooses_how_many_of_the_heaviest(run, alice, api):
    body = post(api(alice), run, top_k=2, sample_size=5).json()
    assert [row["id"] for row in body["rows"]] == ["ins-0003", "ins-0000"]


def test_a_dry_run_says_what_it_would_cost_and_queues_nothing(run, alice, api, enqueued, settings):
    settings.INSPO_HEATMAP_MAX_ANSWERS = 1000
    response = post(api(alice), run, dry_run=True, top_k=3, sample_size=40)
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "dry_run": True,
        "instructions": ["ins-0003", "ins-0000", "ins-0002"],
        "steps": [2, 4],
        "benchmark": "builtin",
        "sample_size": 40,
        "cells": 6,
        "questions": 40,
        "answers": 240,
        "max_answers": 1000,
    }
    assert not Heatmap.objects.exists() and enqueued == [] and not RunNote.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"instructions": [f"ins-{i:04d}" for i in range(13)]}, "instructions", "no more than 12"),
        ({"instructions": ["ins-9999"]}, "instructions", "no instruction 'ins-9999' in this run"),
        ({"instructions": []}, "instructions", ""),
        ({"instructions": "ins-0000"}, "instructions", ""),
        ({"instructions": ["ins-\u00000"]}, "instructions", ""),
        ({"steps": [99]}, "steps", "no checkpoint on disk for step 99 (steps with one: 2, 4)"),
        ({"steps": [6]}, "steps", "no checkpoint on disk for step 6"),
        ({"steps": list(range(13))}, "steps", "no more than 12"),
        ({"steps": [-1]}, "steps", ""),
        ({"top_k": 13}, "top_k", "12"),
        ({"top_k": 0}, "top_k", ""),
        ({"sample_size": 501}, "sample_size", "500"),
        ({"sample_size": 0}, "sample_size", ""),
        ({"sample_seed": -1}, "sample_seed", ""),
        ({"benchmark": "/etc/passwd"}, "benchmark", "must lie in your team's data directory"),
        ({"benchmark": "../../other-team/test.jsonl"}, "benchmark", "must lie in your team's data directory"),
        ({"dry_run": "maybe"}, "dry_run", ""),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_its_bound(run, alice, api, enqueued, body, field, says):
    for sent in [body] if "dry_run" in body else [body, {**body, "dry_run": True}]:
        response = post(api(alice), run, **sent)
        assert response.status_code == 400, response.json()
        assert field in response.json(), response.json()
        assert says in " ".join(map(str, response.json()[field]))
    assert not Heatmap.objects.exists() and enqueued == []


def test_a_heatmap_that_would_cost_too_much_is_a_400_that_says_the_bound(run, alice, api, settings):
    settings.INSPO_HEATMAP_MAX_ANSWERS = 300
    response = post(api(alice), run, top_k=4, sample_size=50)
    assert response.status_code == 400
    assert response.json()["sample_size"] == [
        "4 instructions × 2 checkpoints × 50 questions = 400 answers; a heatmap may cost at most 300: choose fewer"
    ]
    assert post(api(alice), run, top_k=3, sample_size=50).status_code == 202  # 300 is allowed


def test_a_body_that_is_not_a_json_object_is_a_400(run, alice, api):
    response = api(alice).post(heatmaps_url(run), "[1, 2]", content_type="application/json")
    assert response.status_code == 400 and "non_field_errors" in response.json()


def test_a_run_without_checkpoints_or_instructions_is_a_409_that_says_so(alice, alice_team, api):
    bare = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING)
    InstructionFactory(run=bare)
    for body in ({}, {"dry_run": True}):
        response = post(api(alice), bare, **body)
        assert response.status_code == 409
        assert response.json() == {"detail": "the run has no checkpoint yet: a heatmap scores checkpoints"}
    empty = RunFactory(team=alice_team, creator=alice)
    CheckpointFactory(run=empty, step=2)
    assert post(api(alice), empty).json() == {"detail": "the run has no instructions yet"}
    assert not Heatmap.objects.exists()


def test_one_heatmap_at_a_time_per_run(run, alice, api):
    first = post(api(alice), run, sample_size=5).json()
    again = post(api(alice), run, sample_size=5)
    assert again.status_code == 409 and "queued or running" in again.json()["detail"]
    lifecycle.heatmap_fail(heatmap_id=first["id"], reason="given up")
    assert post(api(alice), run, sample_size=5).status_code == 202


def test_viewers_read_heatmaps_but_cannot_start_or_price_one(run, alice, victor, api, enqueued):
    created = post(api(alice), run, sample_size=5).json()
    viewer = api(victor)
    assert viewer.get(heatmaps_url(run)).status_code == 200
    assert viewer.get(f"{heatmaps_url(run)}{created['id']}/").status_code == 200
    assert viewer.get(f"{heatmaps_url(run)}{created['id']}/cells/{created['cells'][0]['id']}/").status_code == 200
    for body in ({"sample_size": 5}, {"dry_run": True}):
        response = post(viewer, run, **body)
        assert response.status_code == 403 and "member role" in response.json()["detail"]
    assert Heatmap.objects.count() == 1


def test_another_teams_run_heatmap_and_cell_are_404s_and_anonymous_requests_401s(
    run, alice, alice_team, bob, bob_team, api
):
    created = post(api(alice), run, sample_size=5).json()
    heatmap, cell = created["id"], created["cells"][0]["id"]
    outsider = api(bob)
    paths = [heatmaps_url(run), f"{heatmaps_url(run)}{heatmap}/", f"{heatmaps_url(run)}{heatmap}/cells/{cell}/"]
    for path in paths:
        assert outsider.get(path).status_code == 404, path
        assert api(None).get(path).status_code == 401, path
    assert post(outsider, run, sample_size=5).status_code == 404
    assert post(outsider, run, dry_run=True).status_code == 404
    assert api(None).post(heatmaps_url(run), {}, format="json").status_code == 401

    # Bob's own run does not reach alice's heatmap either, nor does another of alice's runs, or another heatmap.
    theirs = RunFactory(team=bob_team, creator=bob)
    mine = RunFactory(team=alice_team, creator=alice)
    assert outsider.get(f"{heatmaps_url(theirs)}{heatmap}/").status_code == 404
    assert api(alice).get(f"{heatmaps_url(mine)}{heatmap}/").status_code == 404
    assert api(alice).get(f"{heatmaps_url(mine)}{heatmap}/cells/{cell}/").status_code == 404
    assert api(alice).get(f"{heatmaps_url(run)}{heatmap + 1000}/cells/{cell}/").status_code == 404
    assert outsider.get(heatmaps_url(theirs)).json() == []


def scored(heatmap_id, worker="cpu@tests"):
    """The worker's side, as workers.heatmap drives it: claim, draw the sample, store cells."""
    claim = lifecycle.heatmap_claim(heatmap_id=heatmap_id, worker=worker)
    assert claim is not None
    assert lifecycle.heatmap_sample(claim, ["q1", "q2"])
    return claim


def answer(em):
    return {
        "instruction_id": "x",
        "question_id": "q1",
        "question": "What is the capital of Peru?",
        "golden_answers": ["Lima"],
        "response": "<think> Peru </think> <answer> Lima </answer>",
        "reward": em,
        "answer": "Lima" if em else "Quito",
        "tool_calls": 0,
        "response_tokens": 9,
        "error": None,
        "em": em,
        "f1": em,
    }


def test_the_grid_fills_in_cell_by_cell_and_a_cell_returns_its_answers(run, alice, victor, api):
    created = post(api(alice), run, instructions=["ins-0003", "ins-0000"], sample_size=2).json()
    cells = {(c["instruction_id"], c["step"]): c["id"] for c in created["cells"]}
    claim = scored(created["id"])
    scores = {("ins-0003", 2): 0.5, ("ins-0000", 2): 1.0, ("ins-0003", 4): 1.0}
    for pair, em in scores.items():
        answers = [answer(em), answer(0.0)]
        assert lifecycle.heatmap_cell_store(
            claim, cell_id=cells[pair], scores={"em": em, "f1": em, "answered": 1.0}, trajectories=answers
        )

    body = api(victor).get(f"{heatmaps_url(run)}{created['id']}/").json()
    assert body["status"] == "running" and body["cells_done"] == 3 and body["questions"] == 2
    grid = {(c["instruction_id"], c["step"]): (c["em"], c["done"]) for c in body["cells"]}
    assert grid[("ins-0000", 4)] == (None, False) and grid[("ins-0000", 2)] == (1.0, True)
    assert body["best"] == {"2": ["ins-0000"]}  # step 4 has one score only: nothing to beat yet

    cell = api(victor).get(f"{heatmaps_url(run)}{created['id']}/cells/{cells[('ins-0003', 2)]}/").json()
    assert (
        cell["em"] == 0.5 and cell["n"] == 2 and cell["instruction_text"] == run.instructions.get(key="ins-0003").text
    )
    assert [a["em"] for a in cell["trajectories"]] == [0.5, 0.0] and cell["trajectories"][0]["answer"] == "Lima"
    pending = api(victor).get(f"{heatmaps_url(run)}{created['id']}/cells/{cells[('ins-0000', 4)]}/").json()
    assert pending["done"] is False and pending["trajectories"] == []

    assert lifecycle.heatmap_cell_store(
        claim, cell_id=cells[("ins-0000", 4)], scores={"em": 0.0, "f1": 0.5}, trajectories=[answer(0.0)]
    )
    assert lifecycle.heatmap_finish(claim)
    listed = api(victor).get(heatmaps_url(run)).json()
    assert [h["status"] for h in listed] == ["finished"] and listed[0]["best"] == {"2": ["ins-0000"], "4": ["ins-0003"]}
    note = RunNote.objects.get(run=run, kind="heatmap_finished")
    assert note.payload == {
        "heatmap_id": created["id"],
        "cells_done": 4,
        "best": {"2": ["ins-0000"], "4": ["ins-0003"]},
    }


def test_a_worker_that_lost_the_heatmap_stores_nothing_and_a_failure_keeps_the_scored_cells(run, alice, api):
    created = post(api(alice), run, instructions=["ins-0003"], sample_size=2).json()
    claim = scored(created["id"])
    first, second = (c["id"] for c in created["cells"])
    assert lifecycle.heatmap_cell_store(claim, cell_id=first, scores={"em": 1.0, "f1": 1.0}, trajectories=[answer(1)])
    assert lifecycle.heatmap_claim(heatmap_id=created["id"], worker="cpu@other") is None  # a second delivery

    later = datetime.now(tz=UTC) + timedelta(hours=1)
    assert lifecycle.sweep(now=later)["evaluations_lost"] == 1
    heatmap = Heatmap.objects.get(pk=created["id"])
    assert heatmap.status == Heatmap.Status.FAILED and heatmap.error.startswith("worker lost: no heartbeat since")
    assert not lifecycle.heatmap_cell_store(claim, cell_id=second, scores={"em": 1, "f1": 1}, trajectories=[])
    assert not lifecycle.heatmap_finish(claim)
    assert HeatmapCell.objects.get(pk=first).em == 1.0 and HeatmapCell.objects.get(pk=second).finished_at is None
    assert RunNote.objects.get(run=run, kind="heatmap_failed").payload["cells_done"] == 1


def test_a_restarted_worker_fails_its_heatmaps_and_the_sweep_sends_what_the_broker_never_got(run, alice, api, enqueued):
    created = post(api(alice), run, sample_size=2).json()  # the broker is "down": enqueued records, sends nothing
    assert Heatmap.objects.get(pk=created["id"]).enqueued_at is None
    later = datetime.now(tz=UTC) + timedelta(minutes=5)
    assert lifecycle.sweep(now=later)["evaluations_resent"] == 1
    assert enqueued == [(TASK, [created["id"]], "cpu")] and Heatmap.objects.get(pk=created["id"]).enqueued_at

    scored(created["id"], worker="cpu@box")
    assert lifecycle.worker_restarted(worker="cpu@box") == {"runs": 0, "evaluations": 1}
    assert Heatmap.objects.get(pk=created["id"]).error == "worker lost: cpu@box restarted; request it again"


# -- the run page ---------------------------------------------------------------------------------------------


def signed_in(user):
    client = Client()
    client.force_login(user)
    return client


def checkboxes(page, name):
    """The values of the form's checkboxes called `name`, and which of them are checked."""
    boxes = re.findall(rf'<input type="checkbox" name="{name}" value="([^"]+)"[^>]*?( checked)?>', page)
    return [value for value, _ in boxes], [value for value, checked in boxes if checked]


def test_the_run_page_offers_members_the_form_with_the_heaviest_checked_and_viewers_only_the_heatmaps(
    run, alice, victor, monkeypatch
):
    monkeypatch.setattr("webapp.runs.forms.DEFAULT_TOP_K", 2)
    page = signed_in(alice).get(reverse("runs:detail", kwargs={"run_id": run.pk})).content.decode()
    assert 'data-testid="heatmap-form"' in page and 'data-max-answers="5000"' in page
    assert checkboxes(page, "instructions") == (
        ["ins-0003", "ins-0000", "ins-0002", "ins-0001"],
        ["ins-0003", "ins-0000"],
    )
    assert checkboxes(page, "steps") == (["2", "4"], ["2", "4"])  # step 6's checkpoint is gone
    assert "ins-0001 · weight 0.100 · pruned at step 2 · " in page
    viewer = signed_in(victor).get(reverse("runs:detail", kwargs={"run_id": run.pk})).content.decode()
    assert 'data-testid="heatmaps"' in viewer and 'data-testid="heatmap-form"' not in viewer
    assert 'data-testid="heatmap-one-checkpoint"' not in page


def test_the_form_says_when_the_run_kept_one_checkpoint_so_its_heatmap_has_one_column(run, alice):
    run.checkpoints.filter(step=2).update(available=False)
    page = signed_in(alice).get(reverse("runs:detail", kwargs={"run_id": run.pk})).content.decode()
    assert checkboxes(page, "steps") == (["4"], ["4"])
    note = re.search(r'data-testid="heatmap-one-checkpoint">(.*?)</p>', page)
    assert note and "one checkpoint" in note.group(1) and "checkpoint.keep_last" in note.group(1)


def test_the_page_form_queues_a_heatmap_and_a_viewer_is_refused(
    run, alice, victor, enqueued, django_capture_on_commit_callbacks
):
    url = reverse("runs:heatmap", kwargs={"run_id": run.pk})
    form = {"instructions": ["ins-0000", "ins-0001"], "steps": ["2"], "benchmark": "builtin", "sample_size": "7"}
    form["sample_seed"] = "0"
    assert signed_in(victor).post(url, form).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(alice).post(url, form)
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", kwargs={"run_id": run.pk})
    heatmap = Heatmap.objects.get()
    assert heatmap.sample_size == 7 and enqueued == [(TASK, [heatmap.pk], "cpu")]
    rows = heatmap.cells.order_by("row").values_list("instruction__key", "checkpoint__step")
    assert list(rows) == [("ins-0000", 2), ("ins-0001", 2)]
    too_many = signed_in(alice).post(url, {**form, "steps": ["2", "4"]}, follow=True).content.decode()
    assert "queued or running" in too_many  # the service's refusal comes back as a message
