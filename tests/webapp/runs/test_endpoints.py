"""What a submitted run may reach: a keyed optimizer runs on a named endpoint of the operator (its models, its
per-team budget) or on the team's own URL with the team's own key, never on the server's key at a user's URL;
every user-chosen URL must be on the allow-list and resolve to a public address; no string may interpolate."""

from __future__ import annotations

import pytest

from tests.conftest import declare_endpoint
from webapp.accounts.services import team_secret_set
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"
SERVER_KEY = "the-servers-own-key"


def create(client, **overrides):
    return client.post(RUNS, {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")


@pytest.fixture
def stub(httpserver, settings):
    """A stub on 127.0.0.1 the operator allows explicitly (as a self-hosted server on a private address)."""
    settings.INSPO_ALLOW_PRIVATE_HOSTS = [f"localhost:{httpserver.port}"]
    declare_endpoint(settings, "gemini", api_key=SERVER_KEY)
    return httpserver


@pytest.mark.parametrize("provider", ["gemini", "openai"])
def test_a_run_that_brings_its_own_url_without_its_own_key_is_refused(alice, api, stub, enqueued, provider):
    response = create(api(alice), **{"optimizer.provider": provider, "optimizer.base_url": stub.url_for("/v1")})
    assert response.status_code == 400
    message = " ".join(response.json()["config"]["optimizer.team_secret"])
    assert "must bring its own key" in message and SERVER_KEY not in response.content.decode()
    assert stub.log == [] and enqueued == [] and not Run.objects.exists()


def test_a_run_with_its_own_url_and_its_teams_key_is_accepted(alice, alice_team, api, stub):
    team_secret_set(team=alice_team, user=alice, name="our-vllm", value="sk-alice")
    overrides = {"optimizer.provider": "openai", "optimizer.base_url": stub.url_for("/v1")}
    refused = create(api(alice), **overrides, **{"optimizer.team_secret": "somebody-elses"})
    assert "no stored key named" in refused.json()["config"]["optimizer.team_secret"][0]
    accepted = create(api(alice), **overrides, **{"optimizer.team_secret": "our-vllm"})
    assert accepted.status_code == 201, accepted.json()
    assert "sk-alice" not in accepted.content.decode() and stub.log == []


def test_another_teams_key_cannot_be_named(alice, alice_team, bob, api, stub):
    team_secret_set(team=alice_team, user=alice, name="our-vllm", value="sk-alice")
    overrides = {"optimizer.provider": "openai", "optimizer.base_url": stub.url_for("/v1")}
    response = create(api(bob), **overrides, **{"optimizer.team_secret": "our-vllm"})
    assert response.status_code == 400 and "optimizer.team_secret" in response.json()["config"]


def test_a_gemini_run_that_names_nothing_runs_on_the_default_endpoint(alice, api, stub):
    response = create(api(alice), **{"optimizer.provider": "gemini"})
    assert response.status_code == 201, response.json()
    optimizer = response.json()["config"]["optimizer"]
    assert optimizer["endpoint"] == "gemini" and optimizer["base_url"] is None


def test_an_unknown_endpoint_is_a_400_naming_the_declared_ones(alice, api, stub, settings):
    declare_endpoint(settings, "vllm-a100", provider="openai", base_url="http://10.0.0.5:8000/v1")
    response = create(api(alice), **{"optimizer.provider": "openai", "optimizer.endpoint": "nope"})
    assert response.status_code == 400
    assert "gemini, vllm-a100" in response.json()["config"]["optimizer.endpoint"][0]


def test_an_endpoint_serves_its_provider_and_only_its_models(alice, api, stub, settings):
    declare_endpoint(settings, "vllm-a100", provider="openai", base_url="http://10.0.0.5:8000/v1", models=["qwen"])
    client = api(alice)
    wrong_provider = create(client, **{"optimizer.provider": "gemini", "optimizer.endpoint": "vllm-a100"})
    assert "optimizer.provider" in wrong_provider.json()["config"]
    wrong_model = create(client, **{"optimizer.provider": "openai", "optimizer.endpoint": "vllm-a100"})
    assert wrong_model.json()["config"]["optimizer.model"] == ["endpoint 'vllm-a100' allows only qwen"]
    right = create(
        client, **{"optimizer.provider": "openai", "optimizer.endpoint": "vllm-a100", "optimizer.model": "qwen"}
    )
    assert right.status_code == 201, right.json()  # the operator's own address needs no allow-list entry


def test_the_daily_call_budget_of_an_endpoint_is_per_team(alice, bob, api, stub, settings):
    declare_endpoint(settings, "gemini", api_key=SERVER_KEY, team_calls_per_day=60)
    calls = {"optimizer.provider": "gemini", "optimizer.max_calls": 40}
    assert create(api(alice), **calls).status_code == 201
    second = create(api(alice), **calls)
    assert second.status_code == 400
    assert "allows 60 optimizer calls per team per day" in second.json()["config"]["optimizer.max_calls"][0]
    assert create(api(alice), **{**calls, "optimizer.max_calls": 20}).status_code == 201
    assert create(api(bob), **calls).status_code == 201


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/retrieve",
        "http://localhost:8000/retrieve",
        "http://[::1]:8000/retrieve",
        "http://10.0.0.1/retrieve",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/retrieve",
        "file:///etc/passwd",
        "http://search.example.org/retrieve#",
    ],
)
@pytest.mark.parametrize("field", ["env.retriever_url", "optimizer.base_url"])
def test_urls_to_loopback_private_or_off_list_hosts_are_refused_at_submission(alice, api, settings, url, field):
    settings.INSPO_ALLOWED_URL_HOSTS = ["127.0.0.1", "localhost", "::1", "10.0.0.1", "169.254.169.254"]
    overrides = {"env.retriever": "remote", field: url}
    if field == "optimizer.base_url":
        overrides = {"optimizer.provider": "openai", field: url, "optimizer.team_secret": "k"}
    response = create(api(alice), **overrides)
    assert response.status_code == 400, response.json()
    assert field in response.json()["config"] and not Run.objects.exists()


def test_the_operator_may_allow_a_private_host_and_port_explicitly(alice, api, settings):
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:8123"]
    client = api(alice)
    assert (
        create(client, **{"env.retriever": "remote", "env.retriever_url": "http://127.0.0.1:8123"}).status_code == 201
    )
    refused = create(client, **{"env.retriever": "remote", "env.retriever_url": "http://127.0.0.1:8124"})
    assert refused.status_code == 400 and "allow-list" in refused.json()["config"]["env.retriever_url"][0]


@pytest.mark.parametrize(
    "overrides",
    [
        {"backend.model": "${oc.env:GEMINI_API_KEY}"},
        {"env.dataset": "\\${oc.env:DATABASE_URL}"},
        {"population.seed_instruction": "Answer. ${oc.env:DJANGO_SECRET_KEY}"},
        {"population.initial_instructions": ["fine", "${oc.env:OPENAI_API_KEY}"]},
        {"eval.benchmarks": ["builtin", "${oc.decode:x}"]},
        {"optimizer.model": "${oc.env:GEMINI_API_KEY}"},
    ],
)
def test_interpolation_in_any_string_field_is_a_400_naming_the_field(alice, api, overrides):
    response = create(api(alice), **overrides)
    assert response.status_code == 400
    (field,) = overrides
    assert "must not contain '$'" in " ".join(response.json()["config"][field])


@pytest.mark.parametrize(
    "overrides",
    [
        {"backend.model": "org/" + "m" * 5000},
        {"env.dataset": "d" * 5000},
        {"env.retriever": "remote", "env.retriever_url": "http://" + "h" * 300 + ".example.org/"},
        {"optimizer.provider": "openai", "optimizer.endpoint": "e" * 65},
    ],
)
def test_absurd_values_get_a_json_4xx_never_a_500(alice, api, settings, overrides):
    settings.INSPO_ALLOWED_URL_HOSTS = ["*.example.org"]
    response = create(api(alice), **overrides)
    assert response.status_code in (201, 400) and response["Content-Type"] == "application/json", response.content
