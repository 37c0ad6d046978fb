"""The worker side of the lifecycle. The sweep: runs queued while the broker was down are sent once it is back (the
submission itself succeeds); evaluations left running by a worker killed with -9 or restarted are failed with the
reason; a worker that lost its evaluation stores nothing; the schedule comes from settings. How an attempt ends,
what a restarted worker loses, and the rewind of a resumed run to its checkpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from tests.conftest import POSTGRES_UP
from tests.factories import (
    CheckpointFactory,
    InstructionFactory,
    PopulationSnapshotFactory,
    RunFactory,
    StepMetricFactory,
)
from webapp.runs import lifecycle, services
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Evaluation, EvaluationRequest, Instruction, Run

if not POSTGRES_UP:
    pytest.fail("these tests need PostgreSQL at 127.0.0.1:5432", pytrace=False)

pytestmark = pytest.mark.django_db

TRAINING = "workers.tasks.run_training"


@pytest.fixture
def broker_down(monkeypatch):
    """The broker refuses every send until the test sets `down[0] = False`; what got through is recorded."""
    down, sent = [True], []

    def send(name, args, queue):
        if down[0]:
            raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        sent.append((name, args, queue))

    monkeypatch.setattr(run_tasks, "send", send)
    return down, sent


def later(seconds: float = lifecycle.UNSENT_GRACE_S + 1):
    return timezone.now() + timedelta(seconds=seconds)


def test_a_run_submitted_while_the_broker_is_down_is_accepted_and_sent_by_the_sweep_once_it_is_back(
    alice, api, broker_down, django_capture_on_commit_callbacks
):
    down, sent = broker_down
    with django_capture_on_commit_callbacks(execute=True):
        created = api(alice).post("/api/v1/runs/", {"name": "during the outage", "preset": "smoke"}, format="json")
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    assert run.status == Run.Status.QUEUED and run.enqueued_at is None and sent == []

    assert lifecycle.run_resend_unsent(now=later()) == 0  # the broker is still down
    down[0] = False
    assert lifecycle.run_resend_unsent(now=timezone.now()) == 0  # too fresh: its own send may be under way
    assert lifecycle.sweep(now=later())["runs_resent"] == 1
    assert sent == [(TRAINING, [str(run.pk)], "cpu")]
    assert Run.objects.get(pk=run.pk).enqueued_at is not None
    assert lifecycle.sweep(now=later())["runs_resent"] == 0  # sent once, not on every sweep


def test_a_run_the_broker_accepted_is_never_sent_again(alice, alice_team, enqueued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        api_run = services.run_submit(team=alice_team, user=alice, name="fine", config={})
    assert Run.objects.get(pk=api_run.pk).enqueued_at is not None
    assert lifecycle.run_resend_unsent(now=later()) == 0 and len(enqueued) == 1


def test_a_run_resumed_while_the_broker_is_down_is_sent_by_the_sweep(
    alice, alice_team, broker_down, django_capture_on_commit_callbacks, tmp_path
):
    down, sent = broker_down
    run = RunFactory(team=alice_team, status=Run.Status.FAILED, enqueued_at=timezone.now())
    CheckpointFactory(run=run, step=2, path=str(tmp_path))
    with django_capture_on_commit_callbacks(execute=True):
        services.run_resume(run=run, user=alice)
    assert Run.objects.get(pk=run.pk).enqueued_at is None
    down[0] = False
    assert lifecycle.run_resend_unsent(now=later()) == 1 and sent == [(TRAINING, [str(run.pk)], "cpu")]


def test_an_evaluation_requested_while_the_broker_is_down_is_sent_by_the_sweep(
    alice, alice_team, broker_down, django_capture_on_commit_callbacks, tmp_path
):
    down, sent = broker_down
    checkpoint = CheckpointFactory(run=RunFactory(team=alice_team, status=Run.Status.FINISHED), path=str(tmp_path))
    with django_capture_on_commit_callbacks(execute=True):
        request = services.run_evaluate(run=checkpoint.run, user=alice, benchmarks=["builtin"], checkpoint=checkpoint)
    assert EvaluationRequest.objects.get(pk=request.pk).enqueued_at is None
    down[0] = False
    assert lifecycle.sweep(now=later())["evaluations_resent"] == 1
    assert sent == [("workers.tasks.evaluate", [request.pk], "cpu")]


def running_request(team, heartbeat_at, worker="cpu@box"):
    checkpoint = CheckpointFactory(run=RunFactory(team=team, status=Run.Status.FINISHED))
    return EvaluationRequest.objects.create(
        run=checkpoint.run,
        checkpoint=checkpoint,
        benchmarks=["builtin"],
        status=EvaluationRequest.Status.RUNNING,
        worker=worker,
        heartbeat_at=heartbeat_at,
        enqueued_at=heartbeat_at,
    )


def test_an_evaluation_left_running_by_a_killed_worker_is_failed_by_the_sweep(alice_team, settings):
    settings.INSPO_LOST_AFTER_S = 300
    lost = running_request(alice_team, timezone.now() - timedelta(minutes=6))
    alive = running_request(alice_team, timezone.now() - timedelta(minutes=1))
    assert lifecycle.sweep()["evaluations_lost"] == 1
    lost.refresh_from_db()
    assert lost.status == EvaluationRequest.Status.FAILED and lost.finished_at is not None
    assert lost.error.startswith("worker lost: no heartbeat since") and lost.error.endswith("request it again")
    assert EvaluationRequest.objects.get(pk=alive.pk).status == EvaluationRequest.Status.RUNNING


def test_a_restarted_worker_fails_the_evaluations_it_held(alice_team):
    mine = running_request(alice_team, timezone.now(), worker="cpu@box")
    other = running_request(alice_team, timezone.now(), worker="cpu@other")
    assert lifecycle.evaluation_fail_lost(stale_after_s=300, worker="cpu@box") == 1
    assert EvaluationRequest.objects.get(pk=mine.pk).error.startswith("worker lost: cpu@box restarted")
    assert EvaluationRequest.objects.get(pk=other.pk).status == EvaluationRequest.Status.RUNNING


def test_a_worker_that_lost_its_evaluation_stores_nothing(alice_team):
    request = running_request(alice_team, timezone.now() - timedelta(hours=1))
    claim = lifecycle.EvaluationClaim(request_id=request.pk, worker="cpu@box")
    assert claim.beat(stage="evaluate", progress_at=timezone.now())
    assert lifecycle.evaluation_fail_lost(stale_after_s=300, now=later(3600)) == 1
    result = Evaluation(run=request.run, step=2, benchmark="builtin", metric="em", value=1.0, n=1, request=request)
    assert not claim.beat(stage="evaluate", progress_at=timezone.now())
    assert not lifecycle.evaluation_finish(claim, [result])
    assert not Evaluation.objects.filter(request=request).exists()
    assert EvaluationRequest.objects.get(pk=request.pk).status == EvaluationRequest.Status.FAILED


def test_the_sweep_runs_on_the_ops_queue_every_inspo_sweep_every_s(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["sweep"]
    assert entry["task"] == "workers.tasks.sweep" and entry["schedule"] == settings.INSPO_SWEEP_EVERY_S
    assert settings.CELERY_TASK_ROUTES["workers.tasks.sweep"] == {"queue": "ops"}


def test_a_restarted_worker_fails_the_runs_and_evaluations_it_held_and_nothing_else(alice_team):
    held = RunFactory(team=alice_team, status=Run.Status.RUNNING, worker="cpu@box", heartbeat_at=timezone.now())
    elsewhere = RunFactory(team=alice_team, status=Run.Status.RUNNING, worker="cpu@other", heartbeat_at=timezone.now())
    running_request(alice_team, timezone.now(), worker="cpu@box")
    assert lifecycle.worker_restarted(worker="cpu@box") == {"runs": 1, "evaluations": 1}
    assert Run.objects.get(pk=held.pk).status == Run.Status.FAILED
    assert Run.objects.get(pk=elsewhere.pk).status == Run.Status.RUNNING
    assert lifecycle.worker_restarted(worker="cpu@box") == {"runs": 0, "evaluations": 0}


@pytest.mark.parametrize(
    ("engine_status", "stopped_by", "status", "error"),
    [
        ("finished", None, Run.Status.FINISHED, ""),
        ("stopped", "cancelled", Run.Status.CANCELLED, ""),
        ("stopped", "time limit", Run.Status.FAILED, "time limit of 60 s reached; stopped after step 7"),
        ("stopped", "shutdown", Run.Status.FAILED, "the worker cpu@box shut down; stopped after step 7"),
    ],
)
def test_how_the_engine_stopped_decides_how_the_run_ends(engine_status, stopped_by, status, error):
    ended, why = lifecycle.run_outcome(
        engine_status=engine_status, step=7, stopped_by=stopped_by, time_limit_s=60, worker="cpu@box"
    )
    assert ended == status and why.startswith(error)
    assert ended != Run.Status.FAILED or why.endswith("resume to continue")


def test_a_resumed_run_is_rewound_to_its_checkpoints_step(alice_team):
    """What the lost attempt stored after the checkpoint goes; what it retired after it comes back."""
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING, step=5)
    seed = InstructionFactory(run=run, key="ins-0000", retired_step=4, retired_reason="pruned", retired_weight=0.1)
    late = InstructionFactory(run=run, key="ins-0001", birth_step=4)
    for step in (1, 2, 3, 4, 5):
        StepMetricFactory(run=run, step=step)
    PopulationSnapshotFactory(run=run, step=2, best=seed)
    PopulationSnapshotFactory(run=run, step=4, best=late)
    run.best_instruction = late
    run.save()
    lifecycle.run_discard_after(run=run, step=2)
    run.refresh_from_db()
    assert (run.step, run.best_instruction_id) == (2, seed.pk)
    assert list(run.steps.values_list("step", flat=True).order_by("step")) == [1, 2]
    assert not Instruction.objects.filter(pk=late.pk).exists()
    seed.refresh_from_db()
    assert (seed.retired_step, seed.retired_reason, seed.retired_weight) == (None, "", None)
