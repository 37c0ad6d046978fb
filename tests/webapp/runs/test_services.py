"""Run services: submission validated by the engine, enqueued once committed on the backend's queue; cancel,
resume, clone and evaluate with their state rules and roles."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from inspo_engine.config import PAPER_BENCHMARKS
from inspo_engine.presets import preset
from tests.factories import CheckpointFactory, RunFactory
from webapp.core.errors import Conflict, Gone, InvalidInput, QuotaExceeded
from webapp.runs import services
from webapp.runs.configs import config_compose, team_data_dir
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def submit(team, user, **overrides):
    config = preset("smoke").with_overrides(overrides) if overrides else preset("smoke")
    return services.run_submit(team=team, user=user, name="smoke test", config=config, tags=["a", "b", "a"])


def test_a_submitted_run_is_queued_with_its_validated_config(alice, alice_team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = submit(alice_team, alice, lr=2e-6)
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert run.config["grpo"]["lr"] == 2e-6
    assert run.backend == "torch" and run.seed == 0 and run.total_steps == 4
    assert sorted(t.name for t in run.tags.all()) == ["a", "b"]


def test_training_is_enqueued_only_after_commit_and_on_the_cpu_queue(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = submit(alice_team, alice)
    assert enqueued == []
    for callback in callbacks:
        callback()
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "cpu")]


def test_a_verl_run_goes_to_the_gpu_queue(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks, settings, tmp_path
):
    settings.INSPO_DATA_DIR = tmp_path
    for name in PAPER_BENCHMARKS:  # the paper preset's benchmarks, in the team's data
        (team_data_dir(alice_team) / name).mkdir(parents=True)
    config = config_compose(preset="paper")
    with django_capture_on_commit_callbacks(execute=True):
        run = services.run_submit(team=alice_team, user=alice, name="paper", config=config)
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "gpu")]


def test_a_bad_config_names_the_field_and_enqueues_nothing(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    bad = preset("smoke").to_dict()
    bad["grpo"]["group_size"] = 1
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(InvalidInput) as caught:
        services.run_submit(team=alice_team, user=alice, name="bad", config=bad)
    assert "grpo.group_size" in caught.value.errors
    assert caught.value.as_dict()["config"]["grpo.group_size"][0].startswith("must be ≥ 2")
    assert enqueued == [] and not Run.objects.exists()


def test_submit_composes_preset_partial_config_and_overrides_in_that_order(alice, alice_team):
    run = services.run_submit(
        team=alice_team,
        user=alice,
        name="raw",
        preset="smoke",
        config={"grpo": {"lr": 3e-6, "kl_coef": 0.01}, "seed": 4},
        overrides={"lr": 5e-6, "evolution.evolve_every": 2},
    )
    smoke = preset("smoke").to_dict()
    assert run.preset == "smoke" and run.seed == 4
    assert run.config["grpo"] | {"lr": 0} == smoke["grpo"] | {"lr": 0, "kl_coef": 0.01}
    assert run.config["grpo"]["lr"] == 5e-6 and run.config["evolution"]["evolve_every"] == 2


def test_submit_takes_a_composed_run_config_as_it_is_with_the_preset_naming_its_origin(alice, alice_team):
    paper = {"optimizer.provider": "rules", "backend.name": "torch", "eval.benchmarks": ["builtin"], "seed": 9}
    config = preset("paper").with_overrides(paper)
    run = services.run_submit(team=alice_team, user=alice, name="composed", preset="smoke", config=config)
    assert run.preset == "smoke" and run.config == config.to_dict()
    changed = services.run_submit(
        team=alice_team, user=alice, name="changed", preset="paper", config=config, overrides={"seed": 10}
    )
    assert changed.config == config.with_overrides({"seed": 10}).to_dict()


@pytest.mark.parametrize(
    ("inputs", "key", "field"),
    [
        ({"preset": "no-such-preset"}, None, "preset"),
        ({"preset": "smoke", "overrides": {"warp_drive": 1}}, "config", "warp_drive"),
        ({"preset": "smoke", "config": {"grpo": {"group_size": 1}}}, "config", "grpo.group_size"),
        ({"preset": "smoke", "config": {"grpo": 3}, "overrides": {"lr": 1e-6}}, "config", "grpo"),
        ({"preset": "smoke", "overrides": {"env.dataset": "/etc/passwd"}}, "config", "env.dataset"),
    ],
)
def test_submit_refuses_bad_raw_input_naming_the_field(alice, alice_team, enqueued, inputs, key, field):
    with pytest.raises(InvalidInput) as caught:
        services.run_submit(team=alice_team, user=alice, name="bad", **inputs)
    assert caught.value.key == key and field in caught.value.errors
    assert enqueued == [] and not Run.objects.exists()


def test_config_compose_reports_unknown_override_keys():
    with pytest.raises(InvalidInput) as caught:
        config_compose(preset="smoke", overrides={"no_such_knob": 1})
    assert caught.value.errors == {"no_such_knob": ["unknown field"]}


def test_a_viewer_cannot_submit(victor, alice_team):
    with pytest.raises(PermissionDenied):
        submit(alice_team, victor)


def test_someone_from_another_team_cannot_submit_to_it(bob, alice_team):
    with pytest.raises(Http404):
        submit(alice_team, bob)


def test_cancelling_a_queued_run_stops_it_at_once(alice, alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.QUEUED)
    assert services.run_cancel(run=run, user=alice).status == Run.Status.CANCELLED


def test_cancelling_a_running_run_asks_its_worker_to_stop(alice, alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    assert services.run_cancel(run=run, user=alice).status == Run.Status.CANCELLING
    assert services.run_cancel(run=run, user=alice).status == Run.Status.CANCELLING  # asking twice is fine


@pytest.mark.parametrize("status", [Run.Status.FINISHED, Run.Status.FAILED])
def test_a_run_that_ended_cannot_be_cancelled(alice, alice_team, status):
    run = RunFactory(team=alice_team, status=status)
    with pytest.raises(Conflict):
        services.run_cancel(run=run, user=alice)


def test_a_viewer_cannot_cancel(victor, alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    with pytest.raises(PermissionDenied):
        services.run_cancel(run=run, user=victor)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_resume_requeues_a_failed_run_from_its_newest_checkpoint(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    run = RunFactory(team=alice_team, status=Run.Status.FAILED, error="boom")
    CheckpointFactory(run=run, step=2)
    newest = CheckpointFactory(run=run, step=4)
    CheckpointFactory(run=run, step=6, available=False)
    with django_capture_on_commit_callbacks(execute=True):
        resumed = services.run_resume(run=run, user=alice)
    assert resumed.status == Run.Status.QUEUED and resumed.error == ""
    assert resumed.resume_checkpoint == newest
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "cpu")]


def test_resume_needs_a_checkpoint_and_an_ended_run(alice, alice_team):
    failed = RunFactory(team=alice_team, status=Run.Status.FAILED)
    with pytest.raises(Conflict, match="no checkpoint"):
        services.run_resume(run=failed, user=alice)
    running = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    CheckpointFactory(run=running)
    with pytest.raises(Conflict, match="running"):
        services.run_resume(run=running, user=alice)


def test_clone_copies_the_config_with_overrides_into_a_new_run(alice, alice_team, django_capture_on_commit_callbacks):
    source = RunFactory(team=alice_team)
    with django_capture_on_commit_callbacks(execute=True):
        clone = services.run_clone(run=source, user=alice, overrides={"evolution.proposer": "history", "seed": 7})
    assert clone.pk != source.pk and clone.cloned_from == source and clone.team == alice_team
    assert clone.config["evolution"]["proposer"] == "history" and clone.seed == 7
    assert clone.config["grpo"] == source.config["grpo"]


def test_clone_with_a_bad_override_names_the_field(alice, alice_team):
    source = RunFactory(team=alice_team)
    with pytest.raises(InvalidInput) as caught:
        services.run_clone(run=source, user=alice, overrides={"grpo.group_size": 100})
    assert list(caught.value.errors) == ["grpo.group_size"]


def test_evaluate_takes_the_newest_checkpoint_and_enqueues(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    newest = CheckpointFactory(run=run, step=4)
    with django_capture_on_commit_callbacks(execute=True):
        request = services.run_evaluate(run=run, user=alice, benchmarks=["builtin", "builtin", " "], limit=3)
    assert request.checkpoint == newest and request.benchmarks == ["builtin"] and request.limit == 3
    assert enqueued == [("workers.tasks.evaluate", [request.pk], "cpu")]


def test_evaluate_refuses_deleted_checkpoints(alice, alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    gone = CheckpointFactory(run=run, step=2, available=False)
    with pytest.raises(Gone):
        services.run_evaluate(run=run, user=alice, benchmarks=["builtin"], checkpoint=gone)


@pytest.mark.parametrize(
    ("field", "value"),
    [("env.dataset", "/etc/passwd"), ("env.corpus", "../../secrets.jsonl"), ("backend.model", "/root/models/x")],
)
def test_configs_may_name_files_only_inside_the_data_directory(alice, alice_team, settings, tmp_path, field, value):
    settings.INSPO_DATA_DIR = tmp_path
    with pytest.raises(InvalidInput) as caught:
        submit(alice_team, alice, **{field: value})
    assert field in caught.value.errors
    inside = (tmp_path / "teams" / str(alice_team.pk) / "nq" / "train.jsonl").resolve()  # the team's own data
    inside.parent.mkdir(parents=True)
    inside.write_text("{}\n")
    assert submit(alice_team, alice, **{"env.dataset": str(inside)}).config["env"]["dataset"] == str(inside)


def test_evaluation_benchmarks_follow_the_same_path_rule(alice, alice_team, settings, tmp_path):
    settings.INSPO_DATA_DIR = tmp_path
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    CheckpointFactory(run=run)
    with pytest.raises(InvalidInput) as caught:
        services.run_evaluate(run=run, user=alice, benchmarks=["builtin", "/home/bob/private.jsonl"])
    assert "benchmarks" in caught.value.errors


# -- per-team quota of active runs -------------------------------------------------------------------------------


def test_a_team_at_its_active_run_quota_cannot_submit_clone_or_resume(alice, alice_team, bob, bob_team, settings):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 3
    RunFactory(team=alice_team, status=Run.Status.RUNNING)
    RunFactory(team=alice_team, status=Run.Status.CANCELLING)
    submit(alice_team, alice)  # the third active run
    failed = RunFactory(team=alice_team, status=Run.Status.FAILED)
    CheckpointFactory(run=failed)
    message = "your team may have 3 runs queued or running at once and has 3"
    with pytest.raises(QuotaExceeded, match=message):
        submit(alice_team, alice)
    with pytest.raises(QuotaExceeded, match=message):
        services.run_clone(run=failed, user=alice)
    with pytest.raises(QuotaExceeded, match=message):
        services.run_resume(run=failed, user=alice)
    assert Run.objects.filter(team=alice_team, status__in=Run.ACTIVE).count() == 3
    assert submit(bob_team, bob).status == Run.Status.QUEUED  # another team's quota is its own


def test_runs_that_ended_free_the_quota_and_zero_means_no_limit(alice, alice_team, settings):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 1
    for status in (Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED):
        RunFactory(team=alice_team, status=status)
    submit(alice_team, alice)
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 0
    submit(alice_team, alice)
    assert Run.objects.filter(team=alice_team, status=Run.Status.QUEUED).count() == 2


@pytest.mark.parametrize(("mode", "steps"), [("online", 6), ("static", 6), ("pre", 9), ("post", 9)])
def test_a_runs_total_steps_count_every_phase_of_its_mode(alice, alice_team, mode, steps):
    """pre and post optimise the instructions for evolve_until steps besides the training steps."""
    config = preset("smoke").with_overrides({"mode": mode, "grpo.total_steps": 6, "evolution.evolve_until": 3})
    run = services.run_submit(team=alice_team, user=alice, name=mode, config=config)
    assert run.total_steps == steps
