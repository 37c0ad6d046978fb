"""Where a config's files may be: known names ('builtin', the built-in model, a hub id) stay names; anything else is
a path, resolved (`~` expanded, relative to the team's own data directory, symlinks followed) and required to lie
in that team's directory or the shared one. So no team reads another team's data or runs."""

from __future__ import annotations

import pytest

from inspo_engine.presets import preset
from webapp.core.errors import InvalidInput
from webapp.runs import services
from webapp.runs.configs import config_confine, team_data_dir

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(settings, tmp_path):
    settings.INSPO_DATA_DIR = tmp_path / "data"
    settings.INSPO_SHARED_DATA_DIR = tmp_path / "data" / "shared"
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    return tmp_path


def submit(team, user, **overrides):
    return services.run_submit(team=team, user=user, name="paths", config=preset("smoke").with_overrides(overrides))


def test_relative_paths_resolve_inside_the_teams_own_data_directory(alice, alice_team, data):
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
        config_confine(preset("smoke").from_dict(run.config), team=alice_team)
    assert "env.dataset" in caught.value.errors


def test_evaluation_benchmarks_are_confined_the_same_way(alice, alice_team, data):
    from tests.factories import CheckpointFactory, RunFactory

    run = RunFactory(team=alice_team, status="finished")
    CheckpointFactory(run=run)
    with pytest.raises(InvalidInput) as caught:
        services.run_evaluate(run=run, user=alice, benchmarks=["builtin", "~/other.jsonl"])
    assert "benchmarks" in caught.value.errors
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
