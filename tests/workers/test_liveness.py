"""Liveness that means progress, and clean shutdown, inside one worker process: the watchdog stamps the stage a
run is in; a step that hangs is failed by the sweep with that stage; a shutdown request stops the run after its
step with a checkpoint (resumable), and work that outlives its grace is failed and the process ends."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from inspo_engine.events import StageStarted
from tests.conftest import POSTGRES_UP, scripted_config
from tests.engine.fakes import ScriptedBackend
from webapp.runs import lifecycle, services
from webapp.runs.models import Checkpoint, Run, StepMetric
from workers import liveness
from workers.liveness import EXIT_ABANDONED, Watchdog
from workers.training import run_execute

if not POSTGRES_UP:
    pytest.fail("these tests need PostgreSQL at 127.0.0.1:5432", pytrace=False)


@pytest.fixture(autouse=True)
def _no_shutdown_before_or_after():
    liveness.shutdown_forget()
    yield
    liveness.shutdown_forget()


@pytest.fixture
def submit(alice, alice_team, gemini_url, worker_settings):
    def make(**overrides):
        return services.run_submit(team=alice_team, user=alice, name="live", config=scripted_config(**overrides))

    return make


# -- the watchdog on its own -------------------------------------------------------------------------------------


class Claim:
    def __init__(self, held=True):
        self.held, self.beats, self.given_up = held, [], []

    def beat(self, *, stage: str, progress_at: datetime) -> bool:
        self.beats.append((stage, progress_at))
        return self.held

    def give_up(self, reason: str) -> bool:
        self.given_up.append(reason)
        return True


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def watchdog(claim, clock, exits):
    return Watchdog(claim, heartbeat_s=5, grace_s=30, clock=clock, exit=exits.append)


def test_the_heartbeat_carries_the_stage_and_when_the_run_last_moved_on():
    claim, exits = Claim(), []
    dog = watchdog(claim, Clock(), exits)
    dog.beat()
    before = dog.progress_at
    dog.emit(StageStarted(step=7, stage="rollout"))
    dog.beat()
    assert claim.beats[0][0] == "setup" and claim.beats[1] == ("rollout, step 7", dog.progress_at)
    assert dog.progress_at > before and not exits


def test_after_a_shutdown_request_the_step_gets_its_grace_then_the_work_is_failed_and_the_process_ends():
    claim, clock, exits = Claim(), Clock(), []
    dog = watchdog(claim, clock, exits)
    dog.emit(StageStarted(step=4, stage="update"))
    liveness.request_shutdown()
    clock.now = liveness.shutdown_requested_at() + 29
    dog.check()
    assert not claim.given_up and not exits
    clock.now += 2
    dog.check()
    assert claim.given_up == ["the worker shut down and the work did not stop within 30 s (it was in update, step 4)"]
    assert exits == [EXIT_ABANDONED]


def test_a_worker_that_lost_its_claim_ends_the_process_when_its_step_hangs_past_the_grace():
    claim, clock, exits = Claim(held=False), Clock(), []
    dog = watchdog(claim, clock, exits)
    dog.beat()
    clock.now += 29
    dog.check()
    assert not exits
    clock.now += 2
    dog.check()
    assert exits == [EXIT_ABANDONED] and not claim.given_up  # it writes nothing: the run is not its own


@pytest.mark.slow
def test_the_watchdog_thread_beats_while_the_work_runs_and_stops_with_it():
    claim = Claim()
    dog = Watchdog(claim, heartbeat_s=0.05, grace_s=30)
    with dog.watching():
        time.sleep(0.5)
    beats = len(claim.beats)
    time.sleep(0.2)
    assert beats >= 3 and len(claim.beats) == beats


def test_in_a_pool_child_a_task_takes_its_first_sigterm_as_a_shutdown_request_and_leaves_the_next_to_the_pool(
    monkeypatch,
):
    import signal

    def pools_own(signum, frame):
        raise SystemExit(-(256 - signum))

    previous = signal.signal(signal.SIGTERM, pools_own)
    try:
        with liveness.sigterm_asks_to_stop():
            assert signal.getsignal(signal.SIGTERM) is pools_own  # not a pool's child: nothing changes
        monkeypatch.setattr(liveness, "_IN_POOL_CHILD", [True])
        with liveness.sigterm_asks_to_stop():
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
            assert liveness.shutdown_requested_at() is not None
            assert signal.getsignal(signal.SIGTERM) is pools_own
        assert signal.getsignal(signal.SIGTERM) is pools_own
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- a run on this worker ----------------------------------------------------------------------------------------


class ShutdownDuringStep:
    """The scripted policy; the worker is asked to shut down while step `at` rolls out."""

    def __init__(self, at):
        self.inner, self.at, self.calls, self.name = ScriptedBackend(seed=5), at, 0, "scripted"

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            liveness.request_shutdown()
        return self.inner.rollout(requests, group_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.django_db
def test_a_shutdown_stops_the_run_after_its_step_with_a_checkpoint_and_resume_finishes_it(submit, alice):
    run = submit()
    assert run_execute(run_id=run.pk, worker="cpu@box", backend=ShutdownDuringStep(at=3)) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.step == 3 and run.error == (
        "the worker cpu@box shut down; stopped after step 3 with a checkpoint — resume to continue"
    )
    assert Checkpoint.objects.filter(run=run, step=3, available=True).exists()

    liveness.shutdown_forget()  # the worker came back
    services.run_resume(run=run, user=alice)
    assert run_execute(run_id=run.pk, worker="cpu@box", backend=ScriptedBackend(seed=5)) == "finished"
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3, 4, 5, 6]


class HangsAtStep:
    """The scripted policy, whose rollout of step `at` hangs until released."""

    def __init__(self, at):
        self.inner, self.at, self.calls, self.name = ScriptedBackend(seed=5), at, 0, "scripted"
        self.hanging, self.release = threading.Event(), threading.Event()

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            self.hanging.set()
            assert self.release.wait(30), "never released"
        return self.inner.rollout(requests, group_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail("timed out waiting")


@pytest.mark.django_db(transaction=True)
def test_a_step_that_hangs_is_failed_by_the_sweep_with_the_stage_it_hung_in_and_writes_nothing_after(submit):
    run = submit()
    backend, outcome = HangsAtStep(at=3), []

    def work():
        try:
            outcome.append(run_execute(run_id=run.pk, worker="cpu@box", backend=backend))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert backend.hanging.wait(20)
        wait_for(lambda: Run.objects.get(pk=run.pk).stage == "rollout, step 3")  # the heartbeat (1 s) says where
        assert lifecycle.run_fail_stalled(stall_after_s=600) == 0
        later = timezone.now() + timedelta(seconds=601)
        assert lifecycle.run_fail_stalled(stall_after_s=600, now=later) == 1
    finally:
        backend.release.set()
        worker.join(30)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error.startswith("stalled: no progress for 600 s in rollout, step 3")
    assert "(resumable from the checkpoint of step 2)" in run.error
    assert outcome == ["superseded"]  # released, it found the run was no longer its own
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
