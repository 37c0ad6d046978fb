"""Every endpoint and page: anonymous requests are refused, a member of another team gets 404, a viewer reads
but cannot submit, cancel, clone, resume, evaluate or steer — and the team's own members get through."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import (
    CheckpointFactory,
    EvaluationFactory,
    InstructionFactory,
    PopulationMemberFactory,
    RunFactory,
    StepMetricFactory,
    TrajectoryFactory,
)
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice, alice_team, tmp_path, settings):
    """A failed run of alice's team with something in every table and a checkpoint on disk, in its run directory."""
    settings.INSPO_RUNS_DIR = tmp_path
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FAILED)
    seed = InstructionFactory(run=run, key="ins-0000")
    InstructionFactory(run=run, key="ins-0001", parent=seed, origin="reflection", birth_step=2)
    run.best_instruction = seed
    run.save()
    StepMetricFactory(run=run, step=1)
    PopulationMemberFactory(snapshot__run=run, instruction=seed)
    TrajectoryFactory(run=run, instruction=seed)
    EvaluationFactory(run=run, instruction=seed)
    policy = tmp_path / str(run.pk) / "checkpoints" / "step-000002" / "policy"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text("{}")
    CheckpointFactory(run=run, step=2, path=str(policy.parent))
    return run


def url(name, run, **extra):
    kwargs = {"run_id": run.pk, **extra}
    if name == "api:run-checkpoint-archive":
        kwargs["checkpoint_id"] = run.checkpoints.get().pk
    return reverse(name, kwargs=kwargs)


API_READS = [
    "api:run",
    "api:run-metrics",
    "api:run-population",
    "api:run-lineage",
    "api:run-evaluations",
    "api:run-table",
    "api:run-trajectories",
    "api:run-checkpoints",
    "api:run-checkpoint-archive",
    "api:run-best-instruction",
    "api:run-best-instruction-text",
    "api:run-export",
    "api:run-control",
    "api:run-diversity",
    "api:run-heatmaps",
]

# endpoint, body, the status the run needs for the action, what its team's owner gets
API_WRITES = [
    ("api:run-cancel", None, Run.Status.RUNNING, 200),
    ("api:run-clone", {"name": "copy"}, Run.Status.FINISHED, 201),
    ("api:run-resume", None, Run.Status.FAILED, 200),
    ("api:run-evaluate", {"benchmarks": ["builtin"]}, Run.Status.FINISHED, 202),
    ("api:run-control", {"kind": "pin", "instruction_id": "ins-0000"}, Run.Status.RUNNING, 201),
    ("api:run-heatmaps", {"sample_size": 2}, Run.Status.FINISHED, 202),
]


@pytest.mark.parametrize("name", API_READS)
def test_api_reads(name, run, alice, victor, bob, api):
    target = url(name, run)
    assert api(None).get(target).status_code == 401
    assert api(bob).get(target).status_code == 404
    assert api(victor).get(target).status_code == 200
    assert api(alice).get(target).status_code == 200


@pytest.mark.parametrize(("name", "body", "status", "allowed"), API_WRITES)
def test_api_writes(name, body, status, allowed, run, alice, victor, bob, api):
    Run.objects.filter(pk=run.pk).update(status=status)
    target = url(name, run)
    for user, expected in ((None, 401), (bob, 404), (victor, 403)):
        response = api(user).post(target, body, format="json")
        assert response.status_code == expected, (user, response.content)
    assert Run.objects.count() == 1 and Run.objects.get().status == status
    assert not run.evaluation_requests.exists()
    assert api(alice).post(target, body, format="json").status_code == allowed


def test_api_collections(run, alice, victor, bob, api):
    runs = reverse("api:runs")
    assert api(None).get(runs).status_code == 401
    assert api(None).post(runs, {"name": "x", "preset": "smoke"}, format="json").status_code == 401
    assert api(bob).get(runs).json()["count"] == 0
    assert api(victor).get(runs).json()["count"] == 1
    refused = api(victor).post(runs, {"name": "x", "preset": "smoke", "team": "alices"}, format="json")
    assert refused.status_code == 403 and Run.objects.count() == 1
    for name in ("api:presets", "api:teams", "schema", "swagger-ui"):
        assert api(None).get(reverse(name)).status_code == (302 if name == "swagger-ui" else 401)
        assert api(bob).get(reverse(name)).status_code == 200


def test_a_bad_token_is_refused(run):
    client = Client(HTTP_AUTHORIZATION="Token inspo_not-a-real-token")
    assert client.get(reverse("api:runs")).status_code == 401


PAGE_READS = ["runs:detail", "runs:trajectories", "runs:lineage"]
PAGE_WRITES = [
    ("runs:cancel", {}, Run.Status.RUNNING),
    ("runs:resume", {}, Run.Status.FAILED),
    ("runs:clone", {"name": "copy"}, Run.Status.FINISHED),
    ("runs:evaluate", {"benchmarks": "builtin"}, Run.Status.FINISHED),
    ("runs:control", {"kind": "pin", "instruction_id": "ins-0000"}, Run.Status.RUNNING),
    (
        "runs:heatmap",
        {"instructions": "ins-0000", "steps": "2", "benchmark": "builtin", "sample_size": "2", "sample_seed": "0"},
        Run.Status.FINISHED,
    ),
]


def signed_in(user):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def refused_anonymously(response):
    return response.status_code == 302 and response["Location"].startswith(reverse("accounts:login"))


@pytest.mark.parametrize("name", PAGE_READS)
def test_page_reads(name, run, alice, victor, bob):
    target = url(name, run)
    assert refused_anonymously(signed_in(None).get(target))
    assert signed_in(bob).get(target).status_code == 404
    assert signed_in(victor).get(target).status_code == 200
    assert signed_in(alice).get(target).status_code == 200


@pytest.mark.parametrize(("name", "data", "status"), PAGE_WRITES)
def test_page_writes(name, data, status, run, alice, victor, bob):
    Run.objects.filter(pk=run.pk).update(status=status)
    target = url(name, run)
    assert refused_anonymously(signed_in(None).post(target, data))
    assert signed_in(bob).post(target, data).status_code == 404
    assert signed_in(victor).post(target, data).status_code == 403
    assert Run.objects.count() == 1 and Run.objects.get().status == status
    response = signed_in(alice).post(target, data)
    assert response.status_code == 302 and "/runs/" in response["Location"]


def test_run_list_and_new_run_pages(run, alice, victor, bob):
    for name in ("runs:list", "runs:new", "accounts:tokens"):
        assert refused_anonymously(signed_in(None).get(reverse(name)))
    assert run.name not in signed_in(bob).get(reverse("runs:list")).content.decode()
    assert run.name in signed_in(victor).get(reverse("runs:list")).content.decode()
    assert signed_in(victor).get(reverse("runs:new")).status_code == 403
    assert signed_in(victor).post(reverse("runs:new"), {"name": "x", "preset": "smoke"}).status_code == 403
    assert signed_in(alice).get(reverse("runs:new")).status_code == 200


def test_team_pages(run, alice, alice_team, victor, bob):
    team = reverse("accounts:team", kwargs={"slug": alice_team.slug})
    remove = reverse("accounts:member-remove", kwargs={"slug": alice_team.slug, "user_id": victor.pk})
    assert refused_anonymously(signed_in(None).get(team))
    assert signed_in(bob).get(team).status_code == 404
    assert signed_in(bob).post(remove).status_code == 404
    assert signed_in(victor).get(team).status_code == 200
    assert signed_in(victor).post(team, {"username": "victor", "role": "owner"}).status_code == 403
    assert signed_in(victor).post(remove).status_code == 403
    assert alice_team.memberships.get(user=victor).role == "viewer"
