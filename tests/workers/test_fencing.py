"""Fenced workers: every claim of a run is a numbered attempt, and only the attempt that holds the run may write.
A worker whose run was failed as lost, resumed and claimed by another worker stops within one step: its stop check
says stop, its sink, heartbeat and checkpoints write nothing, and it cannot fail or settle the run it lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inspo_engine.events import Overhead, RunSuperseded, StepCompleted
from tests.conftest import POSTGRES_UP, scripted_config
from tests.engine.fakes import ScriptedBackend
from webapp.runs import lifecycle, services
from webapp.runs.models import Checkpoint, Run, StepMetric
from webapp.runs.recorder import DatabaseSink
from workers.training import StopCheck, run_execute, run_out_dir

if not POSTGRES_UP:
    pytest.fail("these tests need PostgreSQL at 127.0.0.1:5432", pytrace=False)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _worker_settings(worker_settings):
    return worker_settings


@pytest.fixture
def submit(alice, alice_team, gemini_url):
    def make(**overrides):
        return services.run_submit(team=alice_team, user=alice, name="fenced", config=scripted_config(**overrides))

    return make


def step_completed(step: int) -> StepCompleted:
    return StepCompleted(
        step=step,
        total_steps=6,
        phase="train",
        reward_mean=0.5,
        reward_std=0.1,
        tool_calls_mean=1.0,
        response_length_mean=10.0,
        instruction_length_mean=5.0,
        metrics={},
        timings={},
        overhead=Overhead(),
    )


def lose_the_run_to_worker_b(run_id, user):
    """What happens while worker A is stuck or cut off: the sweep fails the run as lost, a member resumes it, and
    worker B claims it. Returns B's attempt."""
    far_future = timezone.now() + timedelta(hours=2)  # every heartbeat is stale by then
    assert lifecycle.run_fail_lost(stale_after_s=60, now=far_future) == 1
    services.run_resume(run=Run.objects.get(pk=run_id), user=user)
    attempt = lifecycle.run_claim(run_id=run_id, worker="cpu@B")
    assert attempt is not None
    return attempt


def test_after_a_lost_run_is_resumed_by_worker_b_worker_as_stop_check_says_stop_and_its_sink_writes_nothing(
    submit, alice, tmp_path
):
    run = submit()
    a = lifecycle.run_claim(run_id=run.pk, worker="cpu@A")
    stop_a, sink_a = StopCheck(a, time_limit_s=3600), DatabaseSink(run.pk, attempt=a)
    assert stop_a() is False
    sink_a.emit(step_completed(1))
    sink_a.flush()
    (tmp_path / "step-000001").mkdir()
    Checkpoint.objects.create(run=run, step=1, path=str(tmp_path / "step-000001"), bytes=1)

    b = lose_the_run_to_worker_b(run.pk, alice)
    assert (a.number, b.number) == (1, 2)

    with pytest.raises(RunSuperseded):
        stop_a()
    with pytest.raises(RunSuperseded):
        sink_a.emit(step_completed(999))
        sink_a.flush()
    with pytest.raises(RunSuperseded):
        sink_a.emit(step_completed(1000))  # once it knows, it refuses at once
    assert not a.beat(stage="rollout, step 999", progress_at=timezone.now())
    assert not lifecycle.run_fail(a, "RuntimeError: A crashed after it lost the run")
    assert not lifecycle.run_settle(a, status=Run.Status.FINISHED)

    run.refresh_from_db()
    assert (run.status, run.worker, run.attempts, run.step, run.error) == (Run.Status.RUNNING, "cpu@B", 2, 1, "")
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1]

    stop_b, sink_b = StopCheck(b, time_limit_s=3600), DatabaseSink(run.pk, attempt=b)
    assert stop_b() is False
    sink_b.emit(step_completed(2))
    sink_b.flush()
    assert Run.objects.get(pk=run.pk).step == 2


class TakenOverDuringStep:
    """The scripted policy; while step `at` rolls out, worker A loses the run to worker B."""

    def __init__(self, run_id, user, at):
        self.inner, self.run_id, self.user, self.at, self.calls = ScriptedBackend(seed=5), run_id, user, at, 0
        self.name = "scripted"
        self.attempt_b = None

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            self.attempt_b = lose_the_run_to_worker_b(self.run_id, self.user)
        return self.inner.rollout(requests, group_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_worker_that_lost_its_run_mid_step_stops_within_that_step_and_writes_nothing(submit, alice):
    run = submit()  # checkpoints every 2 steps
    backend = TakenOverDuringStep(run.pk, alice, at=3)
    assert run_execute(run_id=run.pk, worker="cpu@A", backend=backend) == "superseded"
    assert backend.calls == 3  # no step after the one it lost the run in

    run.refresh_from_db()
    assert (run.status, run.worker, run.attempts, run.error) == (Run.Status.RUNNING, "cpu@B", 2, "")
    assert run.step == 2 and list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    checkpoints = run_out_dir(run) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000002"]  # no checkpoint of step 3
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2]
