"""Celery tasks: train a run, evaluate a checkpoint, fail runs whose worker vanished. Each takes ids only and
calls one function of `workers.training` or `workers.evaluation`; time limits come from settings."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from webapp.config.celery import app

from .evaluation import evaluation_execute
from .training import run_execute, run_fail_lost

log = logging.getLogger(__name__)

# Only errors reaching the database are retried: the claim is a conditional update, so a retry of a run that
# was already claimed does nothing.
TRANSIENT = (OperationalError, InterfaceError)


@app.task(
    bind=True,
    name="workers.tasks.run_training",
    acks_late=True,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=3,
)
def run_training(self: Task, run_id: str) -> str:
    return run_execute(run_id=run_id, worker=self.request.hostname or "")


@app.task(
    bind=True,
    name="workers.tasks.evaluate",
    acks_late=True,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=3,
)
def evaluate(self: Task, request_id: int) -> str:
    return evaluation_execute(request_id=request_id)


@app.task(name="workers.tasks.fail_lost_runs")
def fail_lost_runs() -> int:
    return run_fail_lost(stale_after_s=settings.INSPO_LOST_AFTER_S)


@worker_ready.connect
def fail_runs_of_my_previous_life(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts again under the same name lost whatever it was running before."""
    hostname = getattr(sender, "hostname", None)
    if hostname:
        failed = run_fail_lost(stale_after_s=settings.INSPO_LOST_AFTER_S, worker=hostname)
        if failed:
            log.warning("%s: failed %d run(s) this worker held before it restarted", hostname, failed)
