"""A settled run's detail (`GET /api/v1/runs/<id>/`) is rendered once and kept in the cache, with an ETag known
before anything is rendered, until something a settled run can still have changed: its name, its tags, an
evaluation requested of its checkpoints, or its resuming. Another team's run stays a 404."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.factories import RunFactory
from webapp.runs.models import Run, RunTag

pytestmark = pytest.mark.django_db

TIME = datetime(2026, 1, 2, tzinfo=UTC)


def detail(client, run, **headers):
    return client.get(f"/api/v1/runs/{run.pk}/", **headers)


def test_a_settled_runs_detail_is_cached_until_it_is_renamed_tagged_evaluated_or_resumed(
    alice, alice_team, api, django_assert_num_queries
):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, step=3, total_steps=3)
    Run.objects.filter(pk=run.pk).update(finished_at=TIME)
    client = api(alice)
    first = detail(client, run)
    assert first.status_code == 200 and first.json()["total_steps"] == 3
    Run.objects.filter(pk=run.pk).update(total_steps=9)  # behind the run's back: a settled run's total is fixed
    with django_assert_num_queries(3):  # the token, the run with its relations, its tags: nothing rendered
        again = detail(client, run)
    assert again.content == first.content and again["ETag"] == first["ETag"]
    assert detail(client, run, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304

    run.refresh_from_db()
    run.name = "renamed"
    run.save()
    renamed = detail(client, run)
    assert renamed.json()["name"] == "renamed" and renamed["ETag"] != first["ETag"]
    assert detail(client, run, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200  # a stale ETag is not a 304
    RunTag.objects.create(run=run, name="kept")
    assert detail(client, run).json()["tags"] == ["kept"]
    progress = {"step": 3, "done": 10, "total": 10, "seconds": 30.0, "questions": 10, "evaluations": 1}
    Run.objects.filter(pk=run.pk).update(evaluation_progress=progress)  # an evaluation requested of a checkpoint
    assert detail(client, run).json()["activity"]["question_seconds"] == 3.0

    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=2, finished_at=None, total_steps=12)
    assert detail(client, run).json()["total_steps"] == 12  # active: read afresh


def test_a_cached_detail_is_still_a_404_for_another_team(alice, alice_team, bob, api):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, name="alice's secret run")
    assert detail(api(alice), run).status_code == 200  # now cached
    answer = detail(api(bob), run)
    assert answer.status_code == 404 and b"secret" not in answer.content
