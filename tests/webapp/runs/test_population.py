"""The population history endpoint: column-wise (one array per instruction over the snapshots it spans), cached
for runs that no longer change and read afresh once they do, readable by every role of the run's team and a 404 for
everyone else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.renderers import JSONRenderer

from tests.factories import InstructionFactory, PopulationMemberFactory, PopulationSnapshotFactory, RunFactory
from webapp.runs import selectors
from webapp.runs.models import Run
from webapp.runs.outputs import PopulationOutputSerializer

pytestmark = pytest.mark.django_db

TIME = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def recent_none(n):
    """The recent-reward columns of members recorded without them (runs from before they were kept)."""
    return {name: [None] * n for name in ("recent_reward", "recent_low", "recent_high", "recent_samples")}


def population_url(run):
    return f"/api/v1/runs/{run.pk}/population/"


def build_history(run):
    """Five snapshots: a and b start, b leaves at the pruning and comes back, c joins at the evolution."""
    a, b, c = (InstructionFactory(run=run, key=key) for key in ("ins-a", "ins-b", "ins-c"))
    table = [
        (0, "initialised", a, [(a, 0.6), (b, 0.4)]),
        (1, "step", a, [(b, 0.7), (a, 0.5)]),
        (2, "pruned", a, [(a, 0.5)]),
        (2, "evolved", c, [(a, 0.5), (c, 0.8)]),
        (3, "step", None, [(a, 0.4), (b, 0.3)]),
    ]
    for step, reason, best, members in table:
        snapshot = PopulationSnapshotFactory(run=run, step=step, reason=reason, best=best, time=TIME)
        for position, (instruction, weight) in enumerate(members):
            PopulationMemberFactory(
                snapshot=snapshot,
                instruction=instruction,
                weight=weight,
                probability=weight / 2,
                samples=step * 10 + position,
                mean_reward=None if step == 0 else 0.25,
            )
    return a, b, c


def test_it_serves_one_array_per_instruction_over_the_snapshots_it_spans(alice, alice_team, api):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, step=3)
    build_history(run)
    response = api(alice).get(population_url(run))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == {
        "snapshots": {
            "step": [0, 1, 2, 2, 3],
            "reason": ["initialised", "step", "pruned", "evolved", "step"],
            "best_id": ["ins-a", "ins-a", "ins-a", "ins-c", None],
            "time": ["2026-01-02T03:04:05Z"] * 5,
        },
        "instructions": [
            {
                "id": "ins-a",
                "start": 0,
                "weight": [0.6, 0.5, 0.5, 0.5, 0.4],
                "probability": [0.3, 0.25, 0.25, 0.25, 0.2],
                "samples": [0, 11, 20, 20, 30],
                "mean_reward": [None, 0.25, 0.25, 0.25, 0.25],
                **recent_none(5),
            },
            {
                "id": "ins-b",
                "start": 0,
                "weight": [0.4, 0.7, None, None, 0.3],
                "probability": [0.2, 0.35, None, None, 0.15],
                "samples": [1, 10, None, None, 31],
                "mean_reward": [None, 0.25, None, None, 0.25],
                **recent_none(5),
            },
            {
                "id": "ins-c",
                "start": 3,
                "weight": [0.8],
                "probability": [0.4],
                "samples": [21],
                "mean_reward": [0.25],
                **recent_none(1),
            },
        ],
    }


def test_a_run_without_snapshots_has_empty_columns(alice, alice_team, api):
    run = RunFactory(team=alice_team)
    assert api(alice).get(population_url(run)).json() == {
        "snapshots": {"step": [], "reason": [], "best_id": [], "time": []},
        "instructions": [],
    }


def test_every_role_of_the_team_reads_it_and_another_team_gets_a_404(alice, alice_team, mia, victor, bob, api):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    build_history(run)
    for user in (alice, mia, victor):
        assert api(user).get(population_url(run)).status_code == 200
    # Twice: once before anything is cached for bob's request and once after alice's answer was cached.
    for _ in range(2):
        response = api(bob).get(population_url(run))
        assert response.status_code == 404 and "ins-a" not in response.content.decode()
    assert api(None).get(population_url(run)).status_code == 401


def add_member(run, step):
    snapshot = PopulationSnapshotFactory(run=run, step=step, reason="step", time=TIME)
    PopulationMemberFactory(snapshot=snapshot, instruction=run.instructions.get(key="ins-a"), weight=0.1)


def test_a_finished_runs_answer_is_cached_until_the_run_changes(alice, alice_team, api, django_assert_num_queries):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, step=3, attempts=1, finished_at=TIME)
    build_history(run)
    client = api(alice)
    first = client.get(population_url(run)).json()
    add_member(run, 4)  # behind the run's back: a settled run's history does not change by itself
    with django_assert_num_queries(2):  # the token, the run (with its team's membership): no history
        assert client.get(population_url(run)).json() == first

    # Resumed: active runs are read afresh on every request.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=2, finished_at=None)
    resumed = client.get(population_url(run)).json()
    assert resumed["snapshots"]["step"] == [0, 1, 2, 2, 3, 4]
    add_member(run, 5)
    assert client.get(population_url(run)).json()["snapshots"]["step"][-1] == 5

    # Finished again, later: a new key, so the new history and not the first answer.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FINISHED, step=5, finished_at=datetime.now(tz=UTC))
    assert client.get(population_url(run)).json()["snapshots"]["step"] == [0, 1, 2, 2, 3, 4, 5]


@pytest.mark.parametrize("status", [Run.Status.FAILED, Run.Status.CANCELLED])
def test_failed_and_cancelled_runs_are_cached_and_resuming_reads_afresh(alice, alice_team, api, status):
    run = RunFactory(team=alice_team, status=status, step=3, attempts=1)
    build_history(run)
    client = api(alice)
    first = client.get(population_url(run)).json()
    add_member(run, 4)
    assert client.get(population_url(run)).json() == first
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED)
    assert client.get(population_url(run)).json()["snapshots"]["step"][-1] == 4


def test_an_active_runs_answer_is_never_cached(alice, alice_team, api):
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING, step=3)
    build_history(run)
    client = api(alice)
    client.get(population_url(run))
    add_member(run, 4)
    assert client.get(population_url(run)).json()["snapshots"]["step"][-1] == 4
    assert selectors.run_cache_key(run=run, name="population") is None


def test_the_schema_documents_the_column_wise_shape(alice, api):
    schema = api(alice).get("/api/schema/?format=json").json()
    ok = schema["paths"]["/api/v1/runs/{run_id}/population/"]["get"]["responses"]["200"]
    name = ok["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    components = schema["components"]["schemas"]
    assert set(components[name]["properties"]) == {"snapshots", "instructions"}
    instruction = components[name]["properties"]["instructions"]["items"]["$ref"].rsplit("/", 1)[-1]
    columns = components[instruction]["properties"]
    assert set(columns) == {
        "id",
        "start",
        "weight",
        "probability",
        "samples",
        "mean_reward",
        "recent_reward",
        "recent_low",
        "recent_high",
        "recent_samples",
    }
    assert columns["weight"]["type"] == "array" and columns["weight"]["items"]["nullable"] is True


def test_the_output_serializer_reproduces_the_columns_unchanged(alice_team):
    """The view sends the selector's columns without the serializer; the schema stays true only if it would have
    produced the same JSON."""
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    build_history(run)
    columns = selectors.run_population_columns(run=run)
    render = JSONRenderer().render
    assert render(PopulationOutputSerializer(columns).data) == render(columns)


def test_each_members_recent_reward_interval_and_questions_are_recorded_and_served(alice, alice_team, api):
    from inspo_engine.events import InstructionAdded, InstructionInfo, MemberStats, PopulationChanged
    from webapp.runs.recorder import DatabaseSink

    run = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    sink = DatabaseSink(run.pk)
    for key in ("ins-0000", "ins-0001"):
        sink.emit(InstructionAdded(step=0, instruction=InstructionInfo(key, f"text {key}", "seed", None, 0)))
    members = [
        MemberStats(
            "ins-0000", 0.3, 0.6, 2, 0.25, recent_reward=0.3, recent_low=0.1, recent_high=0.5, recent_samples=6
        ),
        MemberStats("ins-0001", 0.2, 0.4, 1, 0.2, recent_reward=0.2, recent_samples=1),  # one question: no interval
    ]
    sink.emit(PopulationChanged(step=3, reason="step", members=members, best_id="ins-0000"))
    sink.flush()
    columns = {c["id"]: c for c in api(alice).get(population_url(run)).json()["instructions"]}
    best, other = columns["ins-0000"], columns["ins-0001"]
    assert (best["recent_reward"], best["recent_low"], best["recent_high"], best["recent_samples"]) == (
        [0.3],
        [0.1],
        [0.5],
        [6],
    )
    assert (other["recent_low"], other["recent_high"], other["recent_samples"]) == ([None], [None], [1])
