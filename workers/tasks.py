"""Celery tasks: train a run, evaluate a checkpoint, evaluate an instruction × checkpoint heatmap, build a corpus's
index, check whether a corpus can answer a questions file, and the periodic sweep (lost and stalled runs, lost
evaluations, rows the broker never received). Each takes ids only and calls one function of `workers.training`,
`workers.evaluation`, `workers.heatmap`, `workers.indexing`, `workers.reach` or `webapp.runs.lifecycle`; time limits
come from settings.

The worker's signals: a warm shutdown (SIGTERM or Ctrl-C to the main process) and a SIGTERM to a pool's child
both ask the run in progress to stop after its current step, with a checkpoint (see `workers.liveness`); an idle
child that gets a SIGTERM exits quietly; a worker that starts again under the same name fails what it held before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Task
from celery.signals import task_postrun, task_prerun, worker_process_init, worker_ready, worker_shutting_down
from django.db import InterfaceError, OperationalError

from webapp.config.celery import app
from webapp.data.indexing import INDEX_TASK
from webapp.data.leakage import LEAKAGE_TASK, leakage_execute
from webapp.data.reach import REACH_TASK
from webapp.runs import lifecycle
from webapp.runs.tasks import EVALUATION_TASK, HEATMAP_TASK, TRAINING_TASK

from .evaluation import evaluation_execute
from .heatmap import heatmap_execute
from .indexing import index_execute
from .liveness import mark_pool_child, note_task, quiet_idle_child, request_shutdown, sigterm_asks_to_stop
from .reach import reach_execute
from .training import run_execute

log = logging.getLogger(__name__)

# Only errors reaching the database are retried: the claim is a conditional update, so a retry of a run that
# was already claimed does nothing.
TRANSIENT = (OperationalError, InterfaceError)


def claimed_work(name: str) -> Callable[[Callable[..., str]], Task]:
    """The task of a queued row that a worker claims first (a run's training, an evaluation request, a heatmap):
    bound (it reads its worker's name), acknowledged late (a message whose worker died is delivered again, and the
    claim then finds the row taken or failed), and retried on database errors only."""
    task: Callable[[Callable[..., str]], Task] = app.task(
        bind=True, name=name, acks_late=True, autoretry_for=TRANSIENT, retry_backoff=5, max_retries=3
    )
    return task


@claimed_work(TRAINING_TASK)
def run_training(self: Task, run_id: str) -> str:
    with sigterm_asks_to_stop():
        return run_execute(run_id=run_id, worker=self.request.hostname or "")


@claimed_work(EVALUATION_TASK)
def evaluate(self: Task, request_id: int) -> str:
    with sigterm_asks_to_stop():
        return evaluation_execute(request_id=request_id, worker=self.request.hostname or "")


@claimed_work(HEATMAP_TASK)
def evaluate_heatmap(self: Task, heatmap_id: int) -> str:
    with sigterm_asks_to_stop():
        return heatmap_execute(heatmap_id=heatmap_id, worker=self.request.hostname or "")


@app.task(name=INDEX_TASK, acks_late=True, autoretry_for=TRANSIENT, retry_backoff=5, max_retries=3)
def build_index(job_id: int) -> str:
    return index_execute(job_id=job_id)


@app.task(name=REACH_TASK, acks_late=True, autoretry_for=TRANSIENT, retry_backoff=5, max_retries=3)
def check_reach(check_id: int) -> str:
    return reach_execute(check_id=check_id)


@app.task(name=LEAKAGE_TASK, acks_late=True, autoretry_for=TRANSIENT, retry_backoff=5, max_retries=3)
def check_leakage(train_spec: str, evaluation_spec: str) -> str:
    """Compare a large pair of question files (`webapp.data.leakage`); the specs name dataset versions by id."""
    return leakage_execute(train_spec=train_spec, evaluation_spec=evaluation_spec)


@app.task(name="workers.tasks.sweep")
def sweep() -> dict[str, int]:
    done = lifecycle.sweep()
    if any(done.values()):
        log.warning("sweep: %s", done)
    return done


@worker_ready.connect
def fail_work_of_my_previous_life(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts again under the same name lost whatever it was running before."""
    hostname = getattr(sender, "hostname", None)
    if hostname:
        failed = lifecycle.worker_restarted(worker=hostname)
        if any(failed.values()):
            log.warning("%s: failed what it held before it restarted: %s", hostname, failed)


@worker_shutting_down.connect
def stop_work_in_progress(sender: Any = None, **kwargs: Any) -> None:
    """The main process begins a shutdown: the work in progress stops after its current step."""
    request_shutdown()


@worker_process_init.connect
def note_pool_child(sender: Any = None, **kwargs: Any) -> None:
    mark_pool_child()
    quiet_idle_child()


@task_prerun.connect
def note_task_started(sender: Any = None, **kwargs: Any) -> None:
    note_task(running=True)


@task_postrun.connect
def note_task_ended(sender: Any = None, **kwargs: Any) -> None:
    note_task(running=False)
