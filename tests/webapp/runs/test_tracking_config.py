"""Trackers through the runs API: an MLflow URL is a user URL (allow-list, no private address), the W&B key is a
team secret named by the run and never stored in its config, and bob's team cannot name alice's key."""

from __future__ import annotations

import pytest

from inspo_engine import tracking
from webapp.accounts.services import team_secret_set
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


def create(client, **fields):
    body = {"name": "tracked", "preset": "smoke", "config": {"tracking": fields}}
    return client.post(RUNS, body, format="json")


def test_trackers_and_a_teams_wandb_key_are_accepted_and_the_key_stays_out_of_the_config(alice, alice_team, api):
    team_secret_set(team=alice_team, user=alice, name="wandb-key", value="wb-secret-of-alice")
    response = create(api(alice), backends=["tensorboard", "wandb"], wandb_secret="wandb-key", project="agents")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["tracking"]["backends"] == ["tensorboard", "wandb"]
    assert "wb-secret-of-alice" not in response.content.decode()
    assert "wb-secret-of-alice" not in str(Run.objects.get().config)


def test_another_teams_wandb_key_cannot_be_named(alice, alice_team, bob, api):
    team_secret_set(team=alice_team, user=alice, name="wandb-key", value="wb-secret-of-alice")
    response = create(api(bob), backends=["wandb"], wandb_secret="wandb-key")
    assert response.status_code == 400
    assert "no stored key named" in response.json()["config"]["tracking.wandb_secret"][0]


@pytest.mark.parametrize(
    "uri", ["http://127.0.0.1:5000", "http://169.254.169.254/latest", "http://mlflow.not-allowed.example"]
)
def test_an_mlflow_server_off_the_allow_list_or_on_a_private_address_is_a_400(alice, api, settings, uri):
    settings.INSPO_ALLOWED_URL_HOSTS = ["mlflow.example.com"]
    response = create(api(alice), backends=["mlflow"], mlflow_uri=uri)
    assert response.status_code == 400, response.json()
    assert "tracking.mlflow_uri" in response.json()["config"]
    assert not Run.objects.exists()


def test_a_non_http_mlflow_uri_is_a_400_naming_the_field(alice, api):
    response = create(api(alice), backends=["mlflow"], mlflow_uri="file:///etc")
    assert response.status_code == 400 and "tracking.mlflow_uri" in response.json()["config"]


def test_a_tracker_whose_package_is_missing_is_a_400_naming_the_package(alice, api, monkeypatch):
    monkeypatch.setitem(tracking.PACKAGES, "wandb", ("no_such_module_for_inspo", "wandb"))
    response = create(api(alice), backends=["wandb"])
    assert response.status_code == 400
    assert "wandb" in response.json()["config"]["tracking.backends"][0]


def test_a_teams_mlflow_token_goes_to_the_runs_mlflow_tracker_and_never_into_its_config(
    alice, alice_team, api, settings, httpserver
):
    from inspo_engine.config import RunConfig
    from inspo_engine.events import ListSink
    from workers.training import _trackers

    settings.INSPO_ALLOW_PRIVATE_HOSTS = [f"localhost:{httpserver.port}"]  # a self-hosted server the operator allows
    uri = f"http://localhost:{httpserver.port}"
    team_secret_set(team=alice_team, user=alice, name="mlflow-token", value="ml-token-of-alice")
    response = create(api(alice), backends=["mlflow"], mlflow_uri=uri, mlflow_secret="mlflow-token")
    assert response.status_code == 201, response.json()
    run = Run.objects.get()
    assert "ml-token-of-alice" not in response.content.decode() and "ml-token-of-alice" not in str(run.config)
    (sink,) = _trackers(run, RunConfig.from_dict(run.config), ListSink())
    (slot,) = sink.slots
    tracker = slot.start()
    assert (tracker.name, tracker.uri) == ("mlflow", uri)
    assert tracker.http.headers["Authorization"] == "Bearer ml-token-of-alice"
    assert tracker.http._transport.policy.private_hosts == (f"localhost:{httpserver.port}",)  # the operator's policy


def test_another_teams_mlflow_token_cannot_be_named(alice, alice_team, bob, api, settings):
    settings.INSPO_ALLOWED_URL_HOSTS = ["mlflow.example.com"]
    team_secret_set(team=alice_team, user=alice, name="mlflow-token", value="ml-token-of-alice")
    response = create(
        api(bob), backends=["mlflow"], mlflow_uri="https://mlflow.example.com", mlflow_secret="mlflow-token"
    )
    assert response.status_code == 400
    assert "no stored key named" in response.json()["config"]["tracking.mlflow_secret"][0]


def test_an_mlflow_token_without_its_server_is_a_400_naming_the_field(alice, alice_team, api):
    team_secret_set(team=alice_team, user=alice, name="mlflow-token", value="ml-token-of-alice")
    response = create(api(alice), backends=["mlflow"], mlflow_secret="mlflow-token")
    assert response.status_code == 400 and "tracking.mlflow_secret" in response.json()["config"]
