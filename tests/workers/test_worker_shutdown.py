"""Clean shutdown, with real processes: a Celery worker asked to stop while a step is in progress (SIGTERM to its
main process as `docker stop` sends it, or to its whole process group as a Ctrl-C'd `make run` or systemd does)
lets that step end, checkpoints it, leaves the run failed and resumable, and exits; a step that does not end
within the grace is failed with where it hung, and the worker exits all the same."""

from __future__ import annotations

import signal
import time

import pytest

from tests.conftest import POSTGRES_UP, REDIS_UP
from tests.workers.conftest import tiny_config
from webapp.runs import services
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Checkpoint, Run

if not (POSTGRES_UP and REDIS_UP):
    pytest.fail("these tests need PostgreSQL at 127.0.0.1:5432 and Redis at 127.0.0.1:6379", pytrace=False)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REAL_SEND = run_tasks.send
TIMEOUT_S = 120


def hang_in_step_4(gate, run):
    """The run's first optimizer call after its checkpoint of step 2 (the evolution at step 4) hangs."""
    gate.hold_when = lambda: Checkpoint.objects.filter(run=run, step=2).exists()
    assert gate.holding.wait(TIMEOUT_S)


@pytest.mark.parametrize("group", [False, True], ids=["main-process", "process-group"])
def test_a_worker_asked_to_stop_ends_the_step_in_progress_checkpoints_it_and_exits(
    start_worker, optimizer_gate, tiny_data_dir, alice, alice_team, monkeypatch, group
):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    worker = start_worker("cpu-stop@%h", INSPO_SHUTDOWN_GRACE_S="60")
    run = services.run_submit(team=alice_team, user=alice, name="stopped", config=tiny_config(tiny_data_dir))
    hang_in_step_4(optimizer_gate, run)

    worker.signal(signal.SIGTERM, group=group)
    time.sleep(1)  # the step is still in progress when the request arrives
    optimizer_gate.release.set()
    assert worker.wait_exit(TIMEOUT_S) == 0, worker.tail()

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.step == 4
    assert (
        run.error == f"the worker {run.worker} shut down; stopped after step 4 with a checkpoint — resume to continue"
    )
    assert Checkpoint.objects.filter(run=run, step=4, available=True).exists()
    assert services.run_resume(run=run, user=alice).status == Run.Status.QUEUED


def test_a_step_that_outlives_the_shutdown_grace_is_failed_with_where_it_hung_and_the_worker_exits(
    start_worker, optimizer_gate, tiny_data_dir, alice, alice_team, monkeypatch
):
    grace_s = 3
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    worker = start_worker("cpu-hung@%h", INSPO_SHUTDOWN_GRACE_S=str(grace_s))
    run = services.run_submit(team=alice_team, user=alice, name="hung", config=tiny_config(tiny_data_dir))
    hang_in_step_4(optimizer_gate, run)

    asked_at = time.monotonic()
    worker.signal(signal.SIGTERM)
    worker.wait_exit(TIMEOUT_S)
    took = time.monotonic() - asked_at
    assert took < grace_s + 15, f"exited {took:.1f} s after the request"

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error == (
        f"the worker shut down and the work did not stop within {grace_s} s (it was in propose, step 4) "
        "(resumable from the checkpoint of step 2)"
    )
    assert services.run_resume(run=run, user=alice).status == Run.Status.QUEUED
