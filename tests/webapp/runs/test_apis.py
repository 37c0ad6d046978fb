"""The runs API: create (validated by the engine, errors by field), list with filters and pages, retrieve,
cancel, clone, resume, evaluate."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inspo_engine.presets import preset
from tests.factories import CheckpointFactory, MembershipFactory, RunFactory
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


def create(client, **body):
    body.setdefault("name", "api run")
    return client.post(RUNS, body, format="json")


def test_create_merges_preset_config_and_overrides(alice, api, enqueued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = create(
            api(alice),
            preset="smoke",
            config={"grpo": {"total_steps": 6}, "evolution": {"proposer": "paraphrase"}},
            overrides={"lr": 3e-6, "seed": 11},
            tags=["ablation", "smoke"],
        )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["team"] == "alices" and body["creator"] == "alice"
    assert body["config"]["grpo"]["total_steps"] == 6 and body["config"]["grpo"]["lr"] == 3e-6
    assert body["config"]["grpo"]["group_size"] == 2  # from the preset
    assert body["config"]["evolution"]["proposer"] == "paraphrase"
    assert body["seed"] == 11 and body["tags"] == ["ablation", "smoke"] and body["queue"] == "cpu"
    assert enqueued == [("workers.tasks.run_training", [body["id"]], "cpu")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"preset": "smoke", "overrides": {"group_size": 1}}, "grpo.group_size"),
        ({"preset": "smoke", "config": {"grpo": {"lr": "fast"}}}, "grpo.lr"),
        ({"preset": "smoke", "config": {"population": {"n_parents": 9}}}, "population.n_parents"),
        ({"preset": "smoke", "overrides": {"warp_drive": True}}, "warp_drive"),
        ({"config": {"optimizer": {"provider": "openai"}}}, "optimizer.base_url"),
    ],
)
def test_a_bad_config_is_a_400_naming_the_field_and_nothing_is_enqueued(
    alice, api, enqueued, django_capture_on_commit_callbacks, body, field
):
    with django_capture_on_commit_callbacks(execute=True):
        response = create(api(alice), **body)
    assert response.status_code == 400
    assert field in response.json()["config"], response.json()
    assert enqueued == [] and not Run.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"preset": "turbo"}, "preset"),
        ({"config": [1, 2]}, "config"),
        ({"config": {"env": {"dataset": "a\u0000b"}}}, "config"),
        ({"name": ""}, "name"),
        ({"tags": ["x" * 65]}, "tags"),
    ],
)
def test_malformed_input_is_a_400_naming_the_input(alice, api, body, field):
    response = create(api(alice), **body)
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_user_in_two_teams_must_name_one_and_a_foreign_team_reads_as_unknown(alice, bob_team, api):
    MembershipFactory(user=alice, team__slug="third", role="member")
    client = api(alice)
    assert create(client).json() == {"team": ["you are in several teams (or none): name one"]}
    foreign, unknown = create(client, team=bob_team.slug), create(client, team="nowhere")
    assert foreign.status_code == unknown.status_code == 400 and foreign.json() == unknown.json()
    assert create(client, team="third").status_code == 201


def test_list_shows_only_my_teams_runs_with_filters_and_pages(alice, mia, alice_team, bob_team, api):
    mine = RunFactory.create_batch(3, team=alice_team, creator=alice, status=Run.Status.FINISHED)
    by_mia = RunFactory(team=alice_team, creator=mia, status=Run.Status.RUNNING)
    by_mia.tags.create(name="baseline")
    RunFactory(team=bob_team, name="bob's secret")
    client = api(alice)

    everything = client.get(RUNS).json()
    assert everything["count"] == 4 and "bob's secret" not in [r["name"] for r in everything["results"]]
    assert [r["id"] for r in client.get(RUNS, {"status": "running"}).json()["results"]] == [str(by_mia.pk)]
    assert [r["id"] for r in client.get(RUNS, {"tag": "baseline"}).json()["results"]] == [str(by_mia.pk)]
    assert {r["id"] for r in client.get(RUNS, {"creator": "alice"}).json()["results"]} == {str(r.pk) for r in mine}
    page = client.get(RUNS, {"page_size": 2}).json()
    assert len(page["results"]) == 2 and page["next"] and page["previous"] is None
    assert client.get(RUNS, {"status": "exploded"}).status_code == 400
    assert client.get(RUNS, {"page": 99}).status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page=", "page"),
        ("page=0", "page"),
        ("page_size=0", "page_size"),
        ("page_size=201", "page_size"),
        ("status=running&status=failed", "status"),
    ],
)
def test_a_bad_page_or_a_repeated_filter_is_a_400_naming_it(alice, api, query, field):
    response = api(alice).get(f"{RUNS}?{query}")
    assert response.status_code == 400 and field in response.json()


def test_retrieve_shows_what_the_config_changed_from_its_preset(alice, alice_team, bob, api):
    run = RunFactory(
        team=alice_team, preset="smoke", config=preset("smoke").with_overrides({"grpo.lr": 2e-6}).to_dict()
    )
    body = api(alice).get(f"{RUNS}{run.pk}/").json()
    assert body["preset_diff"] == [{"field": "grpo.lr", "values": {"preset": preset("smoke").grpo.lr, "run": 2e-6}}]
    unchanged = RunFactory(team=alice_team, preset="smoke")
    assert api(alice).get(f"{RUNS}{unchanged.pk}/").json()["preset_diff"] == []
    custom = RunFactory(team=alice_team, preset="")
    assert api(alice).get(f"{RUNS}{custom.pk}/").json()["preset_diff"] is None
    assert api(bob).get(f"{RUNS}{run.pk}/").status_code == 404


def test_retrieve_shows_progress_and_the_config(alice, alice_team, api):
    run = RunFactory(team=alice_team, step=1, total_steps=4, status=Run.Status.RUNNING)
    body = api(alice).get(f"{RUNS}{run.pk}/").json()
    assert body["progress"] == 0.25 and body["config"]["grpo"]["group_size"] == 2 and body["backend"] == "torch"


def test_cancel_a_running_run_then_a_finished_one(alice, alice_team, api):
    client = api(alice)
    running = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    response = client.post(f"{RUNS}{running.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelling"
    finished = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    response = client.post(f"{RUNS}{finished.pk}/cancel/")
    assert response.status_code == 409 and "finished" in response.json()["detail"]


def test_clone_resume_and_evaluate(alice, alice_team, api, enqueued, django_capture_on_commit_callbacks):
    client = api(alice)
    source = RunFactory(team=alice_team, status=Run.Status.FAILED)
    checkpoint = CheckpointFactory(run=source, step=2)
    with django_capture_on_commit_callbacks(execute=True):
        clone = client.post(f"{RUNS}{source.pk}/clone/", {"overrides": {"kl_coef": 0.01}}, format="json")
        resumed = client.post(f"{RUNS}{source.pk}/resume/")
        evaluation = client.post(
            f"{RUNS}{source.pk}/evaluate/", {"benchmarks": ["builtin"], "checkpoint": checkpoint.pk}, format="json"
        )
    assert clone.status_code == 201 and clone.json()["config"]["grpo"]["kl_coef"] == 0.01
    assert clone.json()["cloned_from"] == str(source.pk)
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued"
    assert evaluation.status_code == 202 and evaluation.json()["checkpoint_step"] == 2
    assert [name for name, _, _ in enqueued] == [
        "workers.tasks.run_training",
        "workers.tasks.run_training",
        "workers.tasks.evaluate",
    ]
    bad = client.post(f"{RUNS}{source.pk}/clone/", {"overrides": {"group_size": 0}}, format="json")
    assert bad.status_code == 400 and "grpo.group_size" in bad.json()["config"]


def test_evaluate_a_checkpoint_of_another_run_is_404(alice, alice_team, api):
    run, other = RunFactory(team=alice_team), RunFactory(team=alice_team)
    foreign = CheckpointFactory(run=other)
    response = api(alice).post(
        f"{RUNS}{run.pk}/evaluate/", {"benchmarks": ["builtin"], "checkpoint": foreign.pk}, format="json"
    )
    assert response.status_code == 404


def test_presets_and_teams(alice, api):
    client = api(alice)
    assert set(client.get("/api/v1/presets/").json()) == {"paper", "cpu-demo", "quick", "smoke"}
    assert client.get("/api/v1/teams/").json() == [{"slug": "alices", "name": "Alice's team", "role": "owner"}]


def test_urls_reverse_under_the_api_namespace():
    assert reverse("api:runs") == RUNS


@pytest.mark.parametrize(
    ("overrides", "field", "bound"),
    [
        ({"grpo.batch_size": 10**9}, "grpo.batch_size", "≤ 8192"),
        ({"evolution.replay_capacity": 10**12}, "evolution.replay_capacity", "≤ 500000"),
        ({"optimizer.max_calls": 10**12}, "optimizer.max_calls", "≤ 1000"),
        ({"log_trajectories": 1000}, "log_trajectories", "≤ 64"),
        ({"checkpoint.checkpoint_every": 1, "checkpoint.keep_last": 0}, "checkpoint.keep_last", "more than 100"),
        ({"population.seed_instruction": "x" * 2_400_000}, "population.seed_instruction", "at most 20000 characters"),
    ],
)
def test_an_out_of_bound_config_is_a_400_naming_the_bound(alice, api, overrides, field, bound):
    response = create(api(alice), preset="paper", overrides=overrides)
    assert response.status_code == 400, response.json()
    assert bound in response.json()["config"][field][0], response.json()
    assert not Run.objects.exists()


def test_a_team_at_its_active_run_quota_gets_a_429_saying_the_quota_and_the_count(alice, alice_team, api, settings):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 2
    client = api(alice)
    assert create(client, preset="smoke").status_code == 201
    source = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    failed = RunFactory(team=alice_team, status=Run.Status.FAILED)
    CheckpointFactory(run=failed)
    message = "your team may have 2 runs queued or running at once and has 2"
    for response in (
        create(client, preset="smoke"),
        client.post(f"{RUNS}{source.pk}/clone/", {}, format="json"),
        client.post(f"{RUNS}{failed.pk}/resume/"),
    ):
        assert response.status_code == 429 and message in response.json()["detail"], response.json()
    assert Run.objects.filter(team=alice_team).count() == 3


def test_a_base_url_that_is_not_http_is_refused_naming_the_scheme(alice, api):
    overrides = {"optimizer.provider": "openai", "optimizer.base_url": "file:///etc/passwd"}
    overrides["optimizer.team_secret"] = "k"
    response = create(api(alice), preset="smoke", overrides=overrides)
    assert response.status_code == 400 and not Run.objects.exists()
    assert "scheme must be http or https" in " ".join(response.json()["config"]["optimizer.base_url"])
