"""A config that becomes a run is composed and admitted once (`configs.config_admit`): the engine validates it
exactly once whatever the submission brings (a preset, a partial config, overrides, the team's default trackers, a
path confined to the team's data), and so for a clone; an experiment admits each of its runs once and stores them as
admitted, counting the optimizer calls its runs reserve together against an endpoint's daily budget."""

from __future__ import annotations

import pytest

from inspo_engine.config import RunConfig
from tests.conftest import declare_endpoint
from webapp.core.errors import InvalidInput
from webapp.experiments import services as experiment_services
from webapp.runs import configs, services
from webapp.runs.configs import team_data_dir
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def validations(monkeypatch):
    """Every RunConfig the engine validates from now on (`from_dict` validates what it builds)."""
    validated: list[RunConfig] = []
    real = RunConfig.validate

    def counting(self: RunConfig) -> None:
        validated.append(self)
        real(self)

    monkeypatch.setattr(RunConfig, "validate", counting)
    return validated


@pytest.fixture
def admissions(monkeypatch):
    """Every call of `config_admit`, wherever it is called from."""
    calls: list[dict] = []
    real = configs.config_admit

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    for module in (configs, services, experiment_services):
        monkeypatch.setattr(module, "config_admit", spy)
    return calls


def test_a_submission_validates_its_config_exactly_once(alice, alice_team, validations, admissions, enqueued):
    run = services.run_submit(
        team=alice_team,
        user=alice,
        name="once",
        preset="smoke",
        config={"grpo": {"lr": 2e-6}},
        overrides={"seed": 3, "evolve_every": 2},
    )
    assert len(validations) == 1 and len(admissions) == 1
    assert run.config["grpo"]["lr"] == 2e-6 and run.seed == 3 and run.config == validations[0].to_dict()


def test_the_teams_default_trackers_and_a_confined_path_are_in_the_one_validation(
    alice, alice_team, validations, enqueued, settings, tmp_path
):
    settings.INSPO_DATA_DIR = tmp_path / "data"
    (team_data_dir(alice_team) / "mine").mkdir(parents=True)
    (team_data_dir(alice_team) / "mine" / "train.jsonl").write_text("{}\n")
    services.team_tracking_set(team=alice_team, user=alice, tracking={"backends": ["tensorboard"]})
    validations.clear()
    run = services.run_submit(
        team=alice_team, user=alice, name="once", preset="smoke", overrides={"env.dataset": "mine/train.jsonl"}
    )
    assert len(validations) == 1
    (validated,) = validations
    assert validated.tracking.backends == ["tensorboard"]
    assert validated.env.dataset == str((team_data_dir(alice_team) / "mine" / "train.jsonl").resolve())
    assert run.config == validated.to_dict()


def test_a_whole_runconfig_is_validated_once_too(alice, alice_team, validations, enqueued):
    config = RunConfig()
    validations.clear()
    services.run_submit(team=alice_team, user=alice, name="whole", config=config)
    assert len(validations) == 1


def test_the_engines_and_the_platforms_errors_come_together_from_the_one_validation(alice, alice_team, validations):
    with pytest.raises(InvalidInput) as caught:
        services.run_submit(
            team=alice_team, user=alice, name="bad", preset="smoke", overrides={"grpo.lr": -1.0, "env.dataset": "/etc"}
        )
    assert {"grpo.lr", "env.dataset"} <= set(caught.value.errors) and caught.value.key == "config"
    assert len(validations) == 1 and not Run.objects.exists()


def test_a_clone_is_admitted_and_validated_once(alice, alice_team, validations, admissions, enqueued):
    source = services.run_submit(team=alice_team, user=alice, name="source", preset="smoke")
    validations.clear()
    admissions.clear()
    clone = services.run_clone(run=source, user=alice, overrides={"grpo.lr": 3e-6})
    assert len(validations) == 1 and len(admissions) == 1
    assert clone.config["grpo"]["lr"] == 3e-6 and clone.preset == "smoke" and clone.cloned_from == source


def test_an_experiment_admits_each_run_once_and_stores_it_as_admitted(alice, alice_team, admissions, enqueued):
    experiment = experiment_services.experiment_submit(
        team=alice_team,
        user=alice,
        name="arms",
        spec={"preset": "smoke", "arms": ["static", "inspo"], "seeds": 2},
    )
    runs = list(Run.objects.filter(experiment=experiment))
    assert len(runs) == 4 and len(admissions) == 4
    assert sorted((call["base"].mode, call["base"].seed) for call in admissions) == sorted(
        (run.config["mode"], run.seed) for run in runs
    )


def test_an_experiments_runs_together_stay_within_an_endpoints_daily_budget(alice, alice_team, settings, enqueued):
    """Each run alone fits the budget; the experiment's runs together do not, and none of them is stored."""
    declare_endpoint(settings, "gemini", api_key="server-key", team_calls_per_day=25)
    settings.INSPO_OPTIMIZER_DEFAULT_ENDPOINT = "gemini"
    spec = {
        "preset": "smoke",
        "overrides": {"optimizer.provider": "gemini", "optimizer.model": "gemini-2.5-pro", "optimizer.max_calls": 10},
        "arms": {"inspo": None, "slower": {"grpo.lr": 2e-7}},  # both call the optimizer (a static arm does not)
        "baseline": "inspo",
        "seeds": 2,
    }
    with pytest.raises(InvalidInput) as caught:
        experiment_services.experiment_submit(team=alice_team, user=alice, name="over", spec=spec)
    (messages,) = [m for field, m in caught.value.errors.items() if field.endswith("optimizer.max_calls")]
    assert "allows 25 optimizer calls per team per day" in messages[0]
    assert not Run.objects.exists()
    spec["seeds"] = 1  # two runs of 10 calls: within 25
    experiment_services.experiment_submit(team=alice_team, user=alice, name="within", spec=spec)
    assert Run.objects.count() == 2
