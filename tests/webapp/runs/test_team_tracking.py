"""A team's default trackers: owners set them (checked as a run's tracking is), everyone in the team reads them, and
a run submitted without naming any tracking field — through the API, the form or an experiment — gets them, while a
run that names one keeps its own and a clone keeps its source's."""

from __future__ import annotations

import dataclasses

import pytest
from django.test import Client
from django.urls import reverse

from inspo_engine import tracking
from inspo_engine.config import TrackingConfig
from webapp.accounts.models import Team
from webapp.accounts.services import team_secret_set
from webapp.core.errors import InvalidInput
from webapp.runs.models import Run
from webapp.runs.outputs import TrackingSectionSerializer
from webapp.runs.services import run_clone, run_submit, team_tracking_set

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"
MLFLOW = "http://127.0.0.1:5000"
DEFAULT = {"backends": ["tensorboard", "mlflow"], "project": "alices-runs", "mlflow_uri": MLFLOW}


def tracking_url(team):
    return f"/api/v1/teams/{team.slug}/tracking/"


@pytest.fixture
def allowed(settings):
    """The operator allows the team's self-hosted MLflow server, on a private address (no DNS needed here)."""
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:5000"]
    return settings


@pytest.fixture
def team_default(alice, alice_team, allowed):
    return team_tracking_set(team=alice_team, user=alice, tracking=DEFAULT)


def stored_tracking(run: Run) -> dict:
    run.refresh_from_db()
    return run.config["tracking"]


# -- the API ------------------------------------------------------------------------------------------------------


def test_an_owner_sets_the_default_and_every_member_reads_it_whole(alice, alice_team, mia, victor, api, allowed):
    response = api(alice).put(tracking_url(alice_team), {"tracking": DEFAULT}, format="json")
    assert response.status_code == 200, response.json()
    whole = {**dataclasses.asdict(TrackingConfig()), **DEFAULT}
    assert response.json() == {"tracking": whole}
    for reader in (alice, mia, victor):
        assert api(reader).get(tracking_url(alice_team)).json() == {"tracking": whole}
    assert Team.objects.get(pk=alice_team.pk).tracking_default == whole


def test_a_team_without_a_default_reads_null_and_null_or_empty_removes_one(alice, alice_team, api, team_default):
    client = api(alice)
    for removal in (None, {}):
        assert client.put(tracking_url(alice_team), {"tracking": DEFAULT}, format="json").status_code == 200
        response = client.put(tracking_url(alice_team), {"tracking": removal}, format="json")
        assert response.status_code == 200 and response.json() == {"tracking": None}
        assert client.get(tracking_url(alice_team)).json() == {"tracking": None}
    assert Team.objects.get(pk=alice_team.pk).tracking_default == {}


def test_members_and_viewers_may_not_change_it_and_another_team_does_not_see_it(
    alice_team, mia, victor, bob, bob_team, api, team_default
):
    for user in (mia, victor):
        response = api(user).put(tracking_url(alice_team), {"tracking": {"backends": []}}, format="json")
        assert response.status_code == 403, user
    outsider = api(bob)
    assert outsider.get(tracking_url(alice_team)).status_code == 404
    assert outsider.put(tracking_url(alice_team), {"tracking": {"backends": []}}, format="json").status_code == 404
    assert Team.objects.get(pk=alice_team.pk).tracking_default["backends"] == DEFAULT["backends"]
    assert api(bob).get(tracking_url(bob_team)).json() == {"tracking": None}


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"backends": ["neptune"]}, "tracking.backends"),
        ({"backends": ["mlflow", "mlflow"]}, "tracking.backends"),
        ({"backends": "mlflow"}, "tracking.backends"),
        ({"project": "no spaces please"}, "tracking.project"),
        ({"mlflow_uri": "file:///etc"}, "tracking.mlflow_uri"),
        ({"mlflow_uri": "http://127.0.0.1:5001"}, "tracking.mlflow_uri"),
        ({"mlflow_uri": "http://169.254.169.254/latest"}, "tracking.mlflow_uri"),
        ({"mlflow_uri": "https://mlflow.not-allowed.example"}, "tracking.mlflow_uri"),
        ({"wandb_secret": "never-stored"}, "tracking.wandb_secret"),
        ({"mlflow_secret": "token"}, "tracking.mlflow_secret"),
        ({"colour": "blue"}, "tracking.colour"),
    ],
)
def test_a_bad_default_is_a_400_naming_the_field_and_changes_nothing(alice, alice_team, api, allowed, section, field):
    response = api(alice).put(tracking_url(alice_team), {"tracking": section}, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert Team.objects.get(pk=alice_team.pk).tracking_default == {}


@pytest.mark.parametrize("body", [{}, {"tracking": ["mlflow"]}, {"tracking": "mlflow"}])
def test_a_body_without_a_tracking_object_is_a_400_naming_it(alice, alice_team, api, body):
    response = api(alice).put(tracking_url(alice_team), body, format="json")
    assert response.status_code == 400 and "tracking" in response.json(), response.json()


def test_a_default_tracker_whose_package_is_missing_is_refused(alice, alice_team, api, monkeypatch):
    monkeypatch.setitem(tracking.PACKAGES, "wandb", ("no_such_module_for_inspo", "wandb"))
    response = api(alice).put(tracking_url(alice_team), {"tracking": {"backends": ["wandb"]}}, format="json")
    assert response.status_code == 400 and "wandb" in response.json()["tracking.backends"][0]


def test_the_default_may_name_the_teams_own_keys_but_not_another_teams(alice, alice_team, bob, bob_team, api):
    team_secret_set(team=alice_team, user=alice, name="wandb-key", value="wb-secret-of-alice")
    section = {"backends": ["wandb"], "wandb_secret": "wandb-key"}
    assert api(bob).put(tracking_url(bob_team), {"tracking": section}, format="json").status_code == 400
    response = api(alice).put(tracking_url(alice_team), {"tracking": section}, format="json")
    assert response.status_code == 200 and "wb-secret-of-alice" not in response.content.decode()


def test_the_documented_section_has_the_engines_fields():
    assert set(TrackingSectionSerializer().fields) == {f.name for f in dataclasses.fields(TrackingConfig)}


def test_the_schema_documents_the_endpoint(client, alice):
    client.force_login(alice)
    schema = client.get("/api/schema/?format=json").json()
    operations = schema["paths"]["/api/v1/teams/{slug}/tracking/"]
    assert operations["get"]["operationId"] == "team_tracking_get"
    assert operations["put"]["operationId"] == "team_tracking_set"
    assert {"400", "403", "404"} <= set(operations["put"]["responses"])


# -- what runs get ------------------------------------------------------------------------------------------------


def test_a_run_that_names_no_tracking_field_gets_the_default(alice, api, team_default):
    response = api(alice).post(RUNS, {"name": "plain", "preset": "smoke"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["tracking"] == team_default
    assert stored_tracking(Run.objects.get()) == team_default


@pytest.mark.parametrize(
    ("body", "backends"),
    [
        ({"config": {"tracking": {"backends": []}}}, []),
        ({"config": {"tracking": {}}}, []),
        ({"config": {"tracking": {"backends": ["wandb"]}}}, ["wandb"]),
        ({"overrides": {"tracking.backends": []}}, []),
        ({"overrides": {"project": "mine"}}, []),
    ],
)
def test_a_run_that_names_a_tracking_field_keeps_its_own(alice, api, team_default, body, backends):
    response = api(alice).post(RUNS, {"name": "own", "preset": "smoke", **body}, format="json")
    assert response.status_code == 201, response.json()
    own = stored_tracking(Run.objects.get())
    assert own["backends"] == backends and own["mlflow_uri"] is None
    assert own["project"] == ("mine" if "overrides" in body and "project" in body["overrides"] else "inspo")


def test_other_config_fields_do_not_count_as_choosing_trackers(alice, api, team_default):
    body = {"name": "tuned", "preset": "smoke", "config": {"grpo": {"lr": 2e-6}}, "overrides": {"seed": 3}}
    assert api(alice).post(RUNS, body, format="json").status_code == 201
    assert stored_tracking(Run.objects.get()) == team_default


def test_another_teams_default_is_not_applied(bob, bob_team, api, team_default):
    response = api(bob).post(RUNS, {"name": "bobs", "preset": "smoke"}, format="json")
    assert response.status_code == 201 and stored_tracking(Run.objects.get())["backends"] == []


def test_the_default_is_checked_again_at_submission_and_the_error_says_where_it_came_from(
    alice, alice_team, api, team_default, settings
):
    settings.INSPO_ALLOW_PRIVATE_HOSTS = []  # the operator no longer allows the team's MLflow server
    response = api(alice).post(RUNS, {"name": "plain", "preset": "smoke"}, format="json")
    assert response.status_code == 400, response.json()
    (message,) = response.json()["config"]["tracking.mlflow_uri"]
    assert "team's default trackers" in message
    assert not Run.objects.exists()
    own = {"name": "own", "preset": "smoke", "config": {"tracking": {"backends": ["tensorboard"]}}}
    assert api(alice).post(RUNS, own, format="json").status_code == 201


def test_a_default_naming_a_key_deleted_since_refuses_the_run_naming_the_field(alice, alice_team, api):
    team_secret_set(team=alice_team, user=alice, name="wandb-key", value="wb")
    team_tracking_set(team=alice_team, user=alice, tracking={"backends": ["wandb"], "wandb_secret": "wandb-key"})
    assert api(alice).delete(f"/api/v1/teams/{alice_team.slug}/secrets/wandb-key/").status_code == 204
    response = api(alice).post(RUNS, {"name": "plain", "preset": "smoke"}, format="json")
    assert response.status_code == 400 and "tracking.wandb_secret" in response.json()["config"]


def test_a_clone_keeps_its_sources_trackers_not_todays_default(alice, alice_team, allowed):
    source = run_submit(team=alice_team, user=alice, name="before", preset="smoke")
    team_tracking_set(team=alice_team, user=alice, tracking=DEFAULT)
    clone = run_clone(run=source, user=alice)
    assert stored_tracking(clone)["backends"] == [] and stored_tracking(clone)["mlflow_uri"] is None


def test_the_service_refuses_a_member(mia, alice_team):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        team_tracking_set(team=alice_team, user=mia, tracking={"backends": []})


def test_the_service_names_engine_errors_by_field(alice, alice_team):
    with pytest.raises(InvalidInput) as error:
        team_tracking_set(team=alice_team, user=alice, tracking={"project": "", "backends": ["x"]})
    assert set(error.value.errors) == {"tracking.project", "tracking.backends"}


# -- experiments --------------------------------------------------------------------------------------------------

EXPERIMENTS = "/api/v1/experiments/"


def test_an_experiments_runs_get_the_default_unless_an_arm_names_trackers(alice, api, team_default):
    spec = {
        "preset": "smoke",
        "arms": {"static": {"mode": "static"}, "inspo": {"tracking.backends": ["tensorboard"]}},
        "seeds": 1,
    }
    response = api(alice).post(EXPERIMENTS, {"name": "tracked", **spec}, format="json")
    assert response.status_code == 201, response.json()
    by_arm = {run.arm: stored_tracking(run) for run in Run.objects.all()}
    assert by_arm["static"] == team_default
    assert by_arm["inspo"]["backends"] == ["tensorboard"] and by_arm["inspo"]["mlflow_uri"] is None


def test_an_experiment_whose_overrides_name_trackers_keeps_them_for_every_arm(alice, api, team_default):
    spec = {"preset": "smoke", "arms": ["static", "inspo"], "seeds": 1, "overrides": {"tracking.backends": []}}
    assert api(alice).post(EXPERIMENTS, {"name": "none", **spec}, format="json").status_code == 201
    assert [stored_tracking(run)["backends"] for run in Run.objects.all()] == [[], []]


def test_an_experiment_refused_for_the_teams_default_names_the_tracking_field(alice, api, team_default, settings):
    settings.INSPO_ALLOW_PRIVATE_HOSTS = []
    spec = {"preset": "smoke", "arms": ["static", "inspo"], "seeds": 1}
    response = api(alice).post(EXPERIMENTS, {"name": "refused", **spec}, format="json")
    assert response.status_code == 400 and "tracking.mlflow_uri" in response.json(), response.json()
    assert not Run.objects.exists()


# -- the run form and the team's page -----------------------------------------------------------------------------


@pytest.fixture
def browser():
    def make(user):
        client = Client()
        client.force_login(user)
        return client

    return make


def test_the_run_form_says_which_default_each_team_has(alice, browser, team_default):
    html = browser(alice).get(reverse("runs:new")).content.decode()
    assert "Alice&#x27;s team: tensorboard, mlflow" in html and 'name="no_tracking"' in html


def test_a_form_run_with_no_tracker_checked_gets_the_default(alice, alice_team, browser, team_default):
    form = {"team": alice_team.pk, "name": "plain", "preset": "smoke"}
    response = browser(alice).post(reverse("runs:new"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert stored_tracking(Run.objects.get()) == team_default


def test_a_form_run_with_no_trackers_ticked_gets_none(alice, alice_team, browser, team_default):
    form = {"team": alice_team.pk, "name": "untracked", "preset": "smoke", "no_tracking": "on"}
    assert browser(alice).post(reverse("runs:new"), form).status_code == 302
    own = stored_tracking(Run.objects.get())
    assert own["backends"] == [] and own["mlflow_uri"] is None


def test_a_form_run_with_trackers_checked_keeps_them(alice, alice_team, browser, team_default):
    form = {"team": alice_team.pk, "name": "mine", "preset": "smoke", "tracking": ["wandb"]}
    assert browser(alice).post(reverse("runs:new"), form).status_code == 302
    own = stored_tracking(Run.objects.get())
    assert own["backends"] == ["wandb"] and own["project"] == "inspo"


def test_the_form_refuses_trackers_checked_together_with_no_trackers(alice, alice_team, browser, team_default):
    form = {"team": alice_team.pk, "name": "x", "preset": "smoke", "tracking": ["wandb"], "no_tracking": "on"}
    response = browser(alice).post(reverse("runs:new"), form)
    assert response.status_code == 400 and "uncheck the trackers" in response.content.decode()
    assert not Run.objects.exists()


def page(team):
    return reverse("runs:team-tracking", kwargs={"slug": team.slug})


def test_an_owner_sets_and_removes_the_default_on_the_teams_page(alice, alice_team, browser, allowed):
    client = browser(alice)
    assert "Default trackers" in client.get(reverse("accounts:team", kwargs={"slug": alice_team.slug})).content.decode()
    form = {"backends": ["mlflow"], "project": "lab", "mlflow_uri": MLFLOW, "wandb_secret": "", "mlflow_secret": ""}
    assert client.post(page(alice_team), form).status_code == 302
    stored = Team.objects.get(pk=alice_team.pk).tracking_default
    assert (stored["backends"], stored["project"], stored["mlflow_uri"], stored["wandb_secret"]) == (
        ["mlflow"],
        "lab",
        MLFLOW,
        None,
    )
    assert "lab" in client.get(page(alice_team)).content.decode()
    assert client.post(page(alice_team), {"remove": "1"}).status_code == 302
    assert Team.objects.get(pk=alice_team.pk).tracking_default == {}


def test_the_page_shows_a_refused_server_on_its_field(alice, alice_team, browser, allowed):
    form = {"backends": ["mlflow"], "project": "lab", "mlflow_uri": "http://127.0.0.1:5001"}
    response = browser(alice).post(page(alice_team), form)
    assert response.status_code == 400 and "INSPO_ALLOWED_URL_HOSTS" in response.content.decode()
    assert Team.objects.get(pk=alice_team.pk).tracking_default == {}


def test_the_page_is_read_only_below_owner_and_missing_for_other_teams(
    alice_team, mia, victor, bob, browser, team_default
):
    for user in (mia, victor):
        client = browser(user)
        html = client.get(page(alice_team)).content.decode()
        assert "alices-runs" in html and "<button" not in html.split("</header>")[-1]
        assert client.post(page(alice_team), {"backends": [], "project": "x"}).status_code == 403
        assert client.post(page(alice_team), {"remove": "1"}).status_code == 403
    assert browser(bob).get(page(alice_team)).status_code == 404
    assert browser(bob).post(page(alice_team), {"remove": "1"}).status_code == 404
    assert Team.objects.get(pk=alice_team.pk).tracking_default["project"] == "alices-runs"
