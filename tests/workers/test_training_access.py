"""What a worker checks before a run connects to anything (`workers.training.run_inputs`), whatever the stored
config says (rows written before these rules, or settings changed since submission): the server's optimizer key
goes only to the operator's own endpoint, a run's own URL gets only its team's key, loopback and private addresses
are refused, and paths stay in the team's data. Stub servers speak the providers' real wire formats."""

from __future__ import annotations

import pytest

from inspo_engine.presets import preset
from tests.conftest import declare_endpoint, scripted_config
from tests.engine.fakes import ScriptedBackend
from tests.factories import RunFactory
from webapp.accounts.services import team_secret_set
from webapp.core.errors import InvalidInput
from webapp.runs.configs import team_data_dir
from webapp.runs.models import Run
from workers.training import run_execute

pytestmark = pytest.mark.django_db

SERVER_KEY = "the-servers-own-key"
GEMINI = "/v1beta/models/gemini-2.5-pro:generateContent"
CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def _worker(worker_settings, settings):
    declare_endpoint(settings, "gemini", api_key=SERVER_KEY)
    return worker_settings


@pytest.fixture
def stub(httpserver, settings):
    """The stub answers like both providers; the operator allows its host explicitly, as a private server."""
    from tests.engine.fakes import gemini_handler

    httpserver.expect_request(GEMINI, method="POST").respond_with_handler(gemini_handler)
    settings.INSPO_ALLOW_PRIVATE_HOSTS = [f"localhost:{httpserver.port}"]
    return httpserver


def stored_run(team, **overrides):
    """A queued run whose config skipped submission's checks (written before them, or by hand)."""
    config = scripted_config().to_dict()
    for path, value in overrides.items():
        section, leaf = path.split(".")
        config[section][leaf] = value
    return RunFactory(team=team, config=config, total_steps=6)


def keys_sent(server):
    headers = [request.headers for request, _ in server.log]
    return [h.get("x-goog-api-key") or h.get("Authorization", "") for h in headers]


@pytest.mark.parametrize("provider", ["gemini", "openai"])
def test_a_stored_run_with_a_user_url_and_no_team_key_never_reaches_it(alice_team, stub, provider):
    run = stored_run(
        alice_team,
        **{"optimizer.provider": provider, "optimizer.endpoint": None, "optimizer.base_url": stub.url_for("/v1")},
    )
    with pytest.raises(InvalidInput, match="must bring its own key"):
        run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5))
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "optimizer.team_secret" in run.error
    assert stub.log == [] and SERVER_KEY not in run.error


def test_a_gemini_run_on_its_own_url_sends_its_teams_key_and_never_the_servers(alice, alice_team, stub):
    team_secret_set(team=alice_team, user=alice, name="ours", value="alice-key")
    run = stored_run(
        alice_team,
        **{"optimizer.endpoint": None, "optimizer.base_url": stub.url_for("/"), "optimizer.team_secret": "ours"},
    )
    assert run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5)) == "finished"
    sent = keys_sent(stub)
    assert sent and set(sent) == {"alice-key"}


def test_an_openai_run_on_its_own_url_sends_its_teams_key_as_bearer(alice, alice_team, stub):
    from tests.engine.test_optimizers_openai import chat_answer

    stub.expect_request(CHAT, method="POST").respond_with_json(chat_answer("<ins_1>Search first.</ins_1>"))
    team_secret_set(team=alice_team, user=alice, name="ours", value="alice-key")
    overrides = {
        "optimizer.provider": "openai",
        "optimizer.endpoint": None,
        "optimizer.base_url": stub.url_for("/v1"),
        "optimizer.team_secret": "ours",
    }
    run = stored_run(alice_team, **overrides)
    run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5))
    sent = keys_sent(stub)
    assert sent and set(sent) == {"Bearer alice-key"}


def test_the_servers_key_goes_to_the_endpoint_the_operator_declared(alice_team, stub, settings):
    declare_endpoint(settings, "gemini", base_url=stub.url_for("/"), api_key=SERVER_KEY)
    run = stored_run(alice_team, **{"optimizer.endpoint": "gemini"})
    assert run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5)) == "finished"
    assert set(keys_sent(stub)) == {SERVER_KEY}


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:{port}/retrieve", "http://10.0.0.1/retrieve", "http://169.254.169.254/latest/meta-data/"],
)
def test_a_retriever_on_a_loopback_or_private_address_is_refused_at_run_time(alice_team, stub, settings, url):
    settings.INSPO_ALLOWED_URL_HOSTS = ["127.0.0.1", "10.0.0.1", "169.254.169.254"]  # listed, still private
    settings.INSPO_ALLOW_PRIVATE_HOSTS = []
    stub.expect_request("/retrieve").respond_with_json({"result": [[]]})
    run = stored_run(alice_team, **{"env.retriever": "remote", "env.retriever_url": url.format(port=stub.port)})
    with pytest.raises(InvalidInput, match="loopback, private, link-local or reserved"):
        run_execute(run_id=run.pk, worker="cpu@test")
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and stub.log == []


def test_an_optimizer_base_url_on_a_private_address_is_refused_at_run_time(alice, alice_team, settings):
    settings.INSPO_ALLOWED_URL_HOSTS = ["10.0.0.1"]
    team_secret_set(team=alice_team, user=alice, name="ours", value="alice-key")
    overrides = {"optimizer.endpoint": None, "optimizer.base_url": "http://10.0.0.1/", "optimizer.team_secret": "ours"}
    run = stored_run(alice_team, **overrides)
    with pytest.raises(InvalidInput, match=r"optimizer\.base_url"):
        run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5))


def test_a_path_into_another_teams_data_fails_the_run_before_it_loads(alice_team, bob_team):
    bobs = team_data_dir(bob_team)
    bobs.mkdir(parents=True)
    (bobs / "train.jsonl").write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    run = stored_run(alice_team, **{"env.dataset": str(bobs / "train.jsonl")})
    with pytest.raises(InvalidInput, match=r"env\.dataset"):
        run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5))
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "env.dataset" in run.error


def test_a_static_run_needs_no_endpoint(alice_team, settings):
    settings.INSPO_OPTIMIZER_ENDPOINTS = {}
    config = preset("smoke").with_overrides({"mode": "static", "optimizer.provider": "gemini", "total_steps": 2})
    run = RunFactory(team=alice_team, config=config.to_dict(), total_steps=2)
    assert run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5)) == "finished"
