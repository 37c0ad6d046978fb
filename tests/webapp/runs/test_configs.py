"""Where a config's files may be: known names ('builtin', the built-in model, a hub id) stay names; anything else is
a path, resolved (`~` expanded, relative to the team's own data directory, symlinks followed) and required to lie
in that team's directory or the shared one. So no team reads another team's data or runs."""

from __future__ import annotations

import pytest

from inspo_engine.presets import preset
from webapp.core.errors import InvalidInput
from webapp.runs import services
from webapp.runs.configs import config_confine, team_data_dir
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(settings, tmp_path):
    settings.INSPO_DATA_DIR = tmp_path / "data"
    settings.INSPO_SHARED_DATA_DIR = tmp_path / "data" / "shared"
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    return tmp_path


def submit(team, user, **overrides):
    return services.run_submit(team=team, user=user, name="paths", config=preset("smoke").with_overrides(overrides))


def files(root, *names):
    """Each name made under `root`: a file, or a directory when it ends in '/'."""
    for name in names:
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")


def test_relative_paths_resolve_inside_the_teams_own_data_directory(alice, alice_team, data):
    files(team_data_dir(alice_team), "nq/train.jsonl")
    run = submit(alice_team, alice, **{"env.dataset": "nq/train.jsonl", "eval.benchmarks": ["builtin", "nq"]})
    root = team_data_dir(alice_team).resolve()
    assert root == (data / "data" / "teams" / str(alice_team.pk)).resolve()
    assert run.config["env"]["dataset"] == str(root / "nq" / "train.jsonl")
    assert run.config["eval"]["benchmarks"] == ["builtin", str(root / "nq")]


def test_names_that_are_not_files_stay_names(alice, alice_team, data):
    run = submit(alice_team, alice, **{"backend.model": "Qwen/Qwen2.5-3B"})
    assert run.config["backend"]["model"] == "Qwen/Qwen2.5-3B"
    assert run.config["env"]["dataset"] == "builtin" and run.config["backend"]["model"] != ""


def test_shared_data_may_be_named_by_every_team(alice, alice_team, bob, bob_team, data):
    shared = data / "data" / "shared" / "wiki18.jsonl"
    files(shared.parent, shared.name)
    for team, user in ((alice_team, alice), (bob_team, bob)):
        assert submit(team, user, **{"env.corpus": str(shared)}).config["env"]["corpus"] == str(shared.resolve())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("env.dataset", "/etc/passwd"),
        ("env.dataset", "~/train.jsonl"),
        ("env.corpus", "~root/corpus.jsonl"),
        ("env.corpus", "../../../secrets.jsonl"),
        ("backend.model", "../../../runs/some-run/checkpoints/step-000002/policy"),
        ("optimizer.local_model_path", "/root/models/x"),
    ],
)
def test_paths_leaving_the_teams_data_are_refused(alice, alice_team, data, field, value):
    with pytest.raises(InvalidInput) as caught:
        submit(alice_team, alice, **{field: value, "optimizer.provider": "rules"})
    assert field in caught.value.errors and caught.value.key == "config"


def test_one_team_cannot_name_another_teams_data_however_it_spells_it(alice, alice_team, bob_team, data):
    bobs = team_data_dir(bob_team)
    (bobs / "nq").mkdir(parents=True)
    (bobs / "nq" / "train.jsonl").write_text("{}\n")
    for value in (str(bobs / "nq" / "train.jsonl"), f"../{bob_team.pk}/nq/train.jsonl"):
        with pytest.raises(InvalidInput) as caught:
            submit(alice_team, alice, **{"env.dataset": value})
        assert "env.dataset" in caught.value.errors


def test_a_symlink_out_of_the_teams_directory_is_refused(alice, alice_team, bob_team, data):
    bobs = team_data_dir(bob_team)
    bobs.mkdir(parents=True)
    (bobs / "private.jsonl").write_text("{}\n")
    alices = team_data_dir(alice_team)
    alices.mkdir(parents=True)
    (alices / "innocent.jsonl").symlink_to(bobs / "private.jsonl")
    with pytest.raises(InvalidInput) as caught:
        submit(alice_team, alice, **{"env.dataset": "innocent.jsonl"})
    assert "env.dataset" in caught.value.errors


def test_a_hub_id_that_is_also_a_local_path_is_refused(alice, alice_team, data, monkeypatch):
    monkeypatch.chdir(data)
    (data / "runs" / "some-run").mkdir(parents=True)
    with pytest.raises(InvalidInput) as caught:
        submit(alice_team, alice, **{"backend.model": "runs/some-run"})
    assert "hub id" in caught.value.errors["backend.model"][0]


def test_a_stored_config_is_checked_again_so_a_path_swapped_for_a_symlink_is_refused(alice, alice_team, data):
    alices = team_data_dir(alice_team)
    alices.mkdir(parents=True)
    (alices / "train.jsonl").write_text("{}\n")
    run = submit(alice_team, alice, **{"env.dataset": "train.jsonl"})
    (alices / "train.jsonl").unlink()
    (alices / "train.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(InvalidInput) as caught:
        config_confine(run.config, team=alice_team)
    assert "env.dataset" in caught.value.errors


def test_evaluation_benchmarks_are_confined_the_same_way(alice, alice_team, data):
    from tests.factories import CheckpointFactory, RunFactory

    run = RunFactory(team=alice_team, status="finished")
    CheckpointFactory(run=run)
    with pytest.raises(InvalidInput) as caught:
        services.run_evaluate(run=run, user=alice, benchmarks=["builtin", "~/other.jsonl"])
    assert "benchmarks" in caught.value.errors
    files(team_data_dir(alice_team), "hotpotqa/")
    request = services.run_evaluate(run=run, user=alice, benchmarks=["builtin", "hotpotqa"])
    assert request.benchmarks == ["builtin", str(team_data_dir(alice_team).resolve() / "hotpotqa")]


@pytest.mark.parametrize("split", ["../../teams/2/private/test", "../test", "a/b", "test\n", ".."])
def test_a_split_is_a_name_never_a_path_into_another_teams_data(alice, alice_team, bob_team, api, data, split):
    """The audit's probe: a benchmark directory of alice's and a split that climbs into bob's (a 201 before)."""
    line = '{"id": "1", "question": "q", "golden_answers": ["a"]}\n'
    for directory in (team_data_dir(alice_team) / "nq", team_data_dir(bob_team) / "private"):
        directory.mkdir(parents=True)
        (directory / "test.jsonl").write_text(line)
    overrides = {"eval.benchmarks": ["nq"], "eval.split": split}
    response = api(alice).post("/api/v1/runs/", {"name": "s", "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 400, response.json()
    assert "eval.split" in response.json()["config"]


# -- a file that is not there is refused at submission, in words that name no directory of the server ---------------


def server_paths(settings, data):
    """Every absolute directory of this server an error could leak: the data directories and the test's tmp dir."""
    return {str(data), str(data.resolve()), str(settings.INSPO_DATA_DIR), str(settings.INSPO_SHARED_DATA_DIR)}


def assert_no_server_path(text, settings, data):
    for path in server_paths(settings, data):
        assert path not in text, f"{path} in {text!r}"


@pytest.mark.parametrize(
    ("overrides", "field", "shown"),
    [
        ({"env.dataset": "nq/train.jsonl"}, "env.dataset", "'nq/train.jsonl' does not exist in your team's data"),
        ({"env.corpus": "wiki.jsonl"}, "env.corpus", "'wiki.jsonl' does not exist in your team's data directory"),
        ({"eval.benchmarks": ["builtin", "hotpotqa"]}, "eval.benchmarks", "'hotpotqa' does not exist in your team's"),
        ({"backend.model": "my-model"}, "backend.model", "'my-model' does not exist in your team's data directory"),
        ({"env.dataset": "../../shared/nq.jsonl"}, "env.dataset", "'nq.jsonl' does not exist in the shared data dir"),
    ],
)
def test_a_run_naming_a_file_that_is_not_there_is_refused_at_once(
    alice, alice_team, api, data, settings, enqueued, overrides, field, shown
):
    """Not "queued" and then failed by the worker's `DatasetError: unknown dataset`: a 400 naming the field."""
    response = api(alice).post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 400, response.json()
    assert shown in response.json()["config"][field][0]
    assert_no_server_path(response.content.decode(), settings, data)
    assert not Run.objects.exists() and enqueued == []


def test_a_path_given_whole_is_named_by_its_place_in_the_teams_directory(alice, alice_team, api, data, settings):
    missing = team_data_dir(alice_team).resolve() / "nq" / "test.jsonl"
    overrides = {"eval.benchmarks": [str(missing)]}
    response = api(alice).post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 400
    [message] = response.json()["config"]["eval.benchmarks"]
    assert message.startswith("'nq/test.jsonl' does not exist in your team's data directory")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"env.dataset": "/etc/passwd"}, "env.dataset"),
        ({"env.corpus": "../../../secrets.jsonl"}, "env.corpus"),
        ({"optimizer.local_model_path": "/root/models/x", "optimizer.provider": "rules"}, "optimizer.local_model_path"),
    ],
)
def test_a_path_outside_the_teams_data_is_refused_without_naming_the_servers_directories(
    alice, alice_team, api, data, settings, overrides, field
):
    response = api(alice).post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 400
    [message] = response.json()["config"][field]
    assert "must lie in your team's data directory or in the shared data directory" in message
    assert_no_server_path(response.content.decode(), settings, data)


def test_a_hub_id_that_is_also_a_path_is_refused_without_naming_the_servers_directories(
    alice, alice_team, api, data, settings, monkeypatch
):
    monkeypatch.chdir(data)
    (data / "org" / "model").mkdir(parents=True)
    body = {"name": "r", "preset": "smoke", "overrides": {"backend.model": "org/model"}}
    response = api(alice).post("/api/v1/runs/", body, format="json")
    assert response.status_code == 400
    assert "give its path in your team's data directory" in response.json()["config"]["backend.model"][0]
    assert_no_server_path(response.content.decode(), settings, data)


def test_a_file_that_is_there_is_taken_and_a_remote_retrievers_corpus_need_not_be(
    alice, alice_team, api, data, settings
):
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:8123"]
    files(team_data_dir(alice_team), "mine/train.jsonl", "mine/test.jsonl", "models/tiny/")
    overrides = {
        "env.dataset": "mine",
        "eval.benchmarks": ["builtin", "mine"],
        "backend.model": "models/tiny",
        "env.retriever": "remote",
        "env.retriever_url": "http://127.0.0.1:8123/retrieve",
        "env.corpus": "not-here.jsonl",  # a remote retriever reads no corpus
    }
    response = api(alice).post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["env"]["dataset"] == str(team_data_dir(alice_team).resolve() / "mine")


def test_an_evaluation_of_a_file_that_is_not_there_is_refused_at_once(alice, alice_team, api, data, settings):
    from tests.factories import CheckpointFactory, RunFactory
    from webapp.runs.models import EvaluationRequest

    run = RunFactory(team=alice_team, status="finished")
    CheckpointFactory(run=run)
    response = api(alice).post(f"/api/v1/runs/{run.pk}/evaluate/", {"benchmarks": ["nq.jsonl"]}, format="json")
    assert response.status_code == 400, response.json()
    [message] = response.json()["benchmarks"]
    assert message.startswith("'nq.jsonl' does not exist in your team's data directory")
    assert_no_server_path(response.content.decode(), settings, data)
    assert not EvaluationRequest.objects.exists()


def test_a_clone_naming_a_file_that_is_not_there_is_refused_at_once(alice, alice_team, api, data, settings):
    from tests.factories import RunFactory

    source = RunFactory(team=alice_team, status="finished", config=preset("smoke").to_dict())
    body = {"overrides": {"env.dataset": "gone.jsonl"}}
    response = api(alice).post(f"/api/v1/runs/{source.pk}/clone/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "'gone.jsonl' does not exist" in response.json()["config"]["env.dataset"][0]
    assert Run.objects.count() == 1


def test_an_experiment_naming_a_file_that_is_not_there_is_refused_at_once(alice, alice_team, api, data, settings):
    from webapp.experiments.models import Experiment

    body = {
        "name": "e",
        "preset": "smoke",
        "arms": ["static", "inspo"],
        "seeds": 1,
        "evaluation": {"benchmarks": ["builtin", "nq.jsonl"]},
    }
    response = api(alice).post("/api/v1/experiments/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "'nq.jsonl' does not exist in your team's data directory" in response.content.decode()
    assert_no_server_path(response.content.decode(), settings, data)
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_an_import_keeps_a_config_whose_files_are_gone(alice_team, data):
    """An imported run read its files long ago: the rules on where they lie hold, not that they are still there."""
    from webapp.runs.configs import config_admit

    config = preset("smoke").with_overrides({"env.dataset": "long-gone.jsonl"})
    admitted = config_admit(team=alice_team, base=config, existing=False).config
    assert admitted.env.dataset == str(team_data_dir(alice_team).resolve() / "long-gone.jsonl")


@pytest.mark.parametrize("field", ["backend.model", "optimizer.local_model_path"])
@pytest.mark.parametrize("value", ["data:mine", "data:shared/x@1", "data:../../etc"])
def test_a_data_reference_in_a_model_field_is_refused_naming_the_field(alice, api, data, field, value):
    body = {"name": "r", "preset": "smoke", "overrides": {field: value, "optimizer.provider": "rules"}}
    response = api(alice).post("/api/v1/runs/", body, format="json")
    assert response.status_code == 400, response.json()
    assert "takes a model" in response.json()["config"][field][0]
    assert not Run.objects.exists()
