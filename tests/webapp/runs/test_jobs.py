"""Queued jobs, the same for evaluation requests and heatmaps: a job is claimed once (a second claim, from another
worker or a redelivery to the same one, is refused), a claim that lost its job writes nothing, a failed job cannot be
claimed, the send marks a row enqueued only while it is queued, and each row goes to its own task on its run's
queue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import CheckpointFactory, RunFactory
from webapp.runs import jobs, lifecycle, tasks
from webapp.runs.models import EvaluationRequest, Heatmap, QueuedJob, Run

pytestmark = pytest.mark.django_db

Status = QueuedJob.Status


def evaluation_request(run):
    return EvaluationRequest.objects.create(run=run, checkpoint=CheckpointFactory(run=run), benchmarks=["builtin"])


def heatmap(run):
    return Heatmap.objects.create(run=run, benchmark="builtin", sample_size=5)


KINDS = [(lifecycle.EVALUATION, evaluation_request), (lifecycle.HEATMAP, heatmap)]


@pytest.fixture(params=KINDS, ids=["evaluation request", "heatmap"])
def queued(request, alice_team):
    """A queued job of each kind, on a finished run of alice's team, and its kind."""
    kind, make = request.param
    return kind, make(RunFactory(team=alice_team, status=Run.Status.FINISHED))


def test_a_job_is_claimed_once_and_a_second_claim_of_it_is_refused(queued):
    kind, job = queued
    claim = jobs.Claim(kind, job.pk, "cpu@a").take()
    assert claim is not None and str(claim) == f"{kind} {job.pk}"
    assert jobs.Claim(kind, job.pk, "cpu@b").take() is None  # another worker
    assert jobs.Claim(kind, job.pk, "cpu@a").take() is None  # the same worker, the message delivered again
    job.refresh_from_db()
    assert job.status == Status.RUNNING and job.worker == "cpu@a" and job.started_at == job.heartbeat_at


def test_only_the_claim_that_holds_a_job_writes_to_it(queued):
    kind, job = queued
    holder = jobs.Claim(kind, job.pk, "cpu@a").take()
    other = jobs.Claim(kind, job.pk, "cpu@b")
    assert holder is not None and holder.beat(stage="evaluate", progress_at=timezone.now())
    assert not other.beat(stage="evaluate", progress_at=timezone.now())
    assert not other.give_up("not mine")
    assert not jobs.job_finish(other, store=lambda: pytest.fail("a claim that does not hold the job stored"))
    assert type(job).objects.get(pk=job.pk).status == Status.RUNNING


def test_a_stale_claim_cannot_write_once_the_sweep_failed_its_job(queued, settings):
    kind, job = queued
    settings.INSPO_LOST_AFTER_S = 300
    claim = jobs.Claim(kind, job.pk, "cpu@a").take()
    assert claim is not None
    assert lifecycle.sweep(now=timezone.now() + timedelta(hours=1))["evaluations_lost"] == 1
    stored = []
    assert not claim.beat(stage="evaluate", progress_at=timezone.now())
    assert not jobs.job_finish(claim, store=lambda: stored.append("results"))
    assert not claim.give_up("too late")
    assert jobs.Claim(kind, job.pk, "cpu@a").take() is None  # a failed job never runs again
    job.refresh_from_db()
    assert stored == [] and job.status == Status.FAILED
    assert job.error.startswith("worker lost: no heartbeat since") and job.error.endswith("request it again")


def test_a_claim_that_gives_up_fails_its_job_with_the_reason(queued):
    kind, job = queued
    claim = jobs.Claim(kind, job.pk, "cpu@a").take()
    assert claim is not None and claim.give_up("RuntimeError: out of memory")
    job.refresh_from_db()
    assert (job.status, job.error) == (Status.FAILED, "RuntimeError: out of memory") and job.finished_at
    assert not claim.give_up("again")


def test_a_job_is_sent_on_its_run_queue_to_its_own_task_once_committed(
    queued, enqueued, django_capture_on_commit_callbacks
):
    kind, job = queued
    Run.objects.filter(pk=job.run_id).update(backend="verl")
    job = type(job).objects.select_related("run").get(pk=job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.enqueue(job)
        assert enqueued == []  # nothing leaves before the transaction commits
    assert enqueued == [(tasks.TASKS[kind.model], [job.pk], "gpu")]
    assert type(job).objects.get(pk=job.pk).enqueued_at is not None


def test_a_late_send_leaves_a_job_that_already_started_unmarked(queued, enqueued):
    kind, job = queued
    assert jobs.Claim(kind, job.pk, "cpu@a").take() is not None
    assert tasks.deliver(job) == 1 and len(enqueued) == 1
    assert type(job).objects.get(pk=job.pk).enqueued_at is None


def test_a_run_is_sent_to_training_by_its_id_as_text(alice_team, enqueued):
    run = RunFactory(team=alice_team, status=Run.Status.QUEUED)
    assert tasks.deliver(run) == 1
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "cpu")]
    assert Run.objects.get(pk=run.pk).enqueued_at is not None
