"""The lineage endpoint's cache: a settled run's graph is rendered once and served until the run changes; an active
run's is read afresh; the cache never serves one team's graph to another."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.factories import InstructionFactory, RunFactory
from webapp.runs import selectors
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

TIME = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def lineage_url(run):
    return f"/api/v1/runs/{run.pk}/lineage/"


def node_ids(response):
    assert response.status_code == 200, response.content
    return [node["id"] for node in response.json()["nodes"]]


def test_a_finished_runs_lineage_is_cached_until_the_run_changes(alice, alice_team, api, django_assert_num_queries):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, step=3, attempts=1, finished_at=TIME)
    seed = InstructionFactory(run=run, key="ins-a")
    InstructionFactory(run=run, key="ins-b", parent=seed, origin="reflection", birth_step=2)
    client = api(alice)
    assert node_ids(client.get(lineage_url(run))) == ["ins-a", "ins-b"]
    InstructionFactory(run=run, key="ins-c", birth_step=3)  # behind the run's back: a settled run does not change
    with django_assert_num_queries(2):  # the token, the run (with its team's membership): no lineage
        assert node_ids(client.get(lineage_url(run))) == ["ins-a", "ins-b"]

    # Resumed: read afresh on every request while active, and under a new key once settled again.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=2, finished_at=None)
    assert node_ids(client.get(lineage_url(run))) == ["ins-a", "ins-b", "ins-c"]
    InstructionFactory(run=run, key="ins-d", birth_step=4)
    assert node_ids(client.get(lineage_url(run)))[-1] == "ins-d"
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FINISHED, step=4, finished_at=datetime.now(tz=UTC))
    assert node_ids(client.get(lineage_url(run))) == ["ins-a", "ins-b", "ins-c", "ins-d"]


def test_an_active_runs_lineage_is_never_cached(alice, alice_team, api):
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING, step=3)
    InstructionFactory(run=run, key="ins-a")
    client = api(alice)
    client.get(lineage_url(run))
    InstructionFactory(run=run, key="ins-b", birth_step=1)
    assert node_ids(client.get(lineage_url(run))) == ["ins-a", "ins-b"]
    assert selectors.run_cache_key(run=run, name="lineage") is None


def test_a_cached_lineage_is_still_a_404_for_another_team(alice, alice_team, mia, bob, api):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, step=3, finished_at=TIME)
    InstructionFactory(run=run, key="ins-a", text="alice's secret instruction")
    assert node_ids(api(alice).get(lineage_url(run))) == ["ins-a"]  # now cached
    assert node_ids(api(mia).get(lineage_url(run))) == ["ins-a"]
    response = api(bob).get(lineage_url(run))
    assert response.status_code == 404 and "secret" not in response.content.decode()
    assert api(None).get(lineage_url(run)).status_code == 401
