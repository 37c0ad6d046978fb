"""Hands runs' work to Celery once the surrounding transaction commits, on the queue the run's backend needs: a
run's training, and its queued jobs (evaluation requests, heatmaps).

The tasks themselves live in `workers.tasks`; they are sent by name so the web process never imports the engine's
training stack. A send that fails (the broker is down) leaves the row queued and unsent: the periodic sweep
(`lifecycle.sweep`) sends it again, so a broker outage delays work but neither loses it nor fails the request.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from webapp.config.celery import app

from .models import EvaluationRequest, Heatmap, QueuedJob, Run

log = logging.getLogger(__name__)

TRAINING_TASK = "workers.tasks.run_training"
EVALUATION_TASK = "workers.tasks.evaluate"
HEATMAP_TASK = "workers.tasks.evaluate_heatmap"


TASKS: dict[type[Run | QueuedJob], str] = {
    Run: TRAINING_TASK,
    EvaluationRequest: EVALUATION_TASK,
    Heatmap: HEATMAP_TASK,
}
"""The task that does each kind of queued row's work."""


def enqueue(row: Run | QueuedJob) -> None:
    """Send the row's task once the surrounding transaction commits (see `deliver`)."""
    transaction.on_commit(lambda: deliver(row))


def deliver(row: Run | QueuedJob) -> int:
    """Send the row's task now, on the queue its run's backend needs, and note that the broker has it (while the
    row is still queued and unsent); 0 when the broker could not be reached."""
    run, arg = (row, str(row.pk)) if isinstance(row, Run) else (row.run, row.pk)
    if not _send_or_log(TASKS[type(row)], [arg], run.queue):
        return 0
    unsent = type(row)._default_manager.filter(pk=row.pk, status=Run.Status.QUEUED, enqueued_at__isnull=True)
    unsent.update(enqueued_at=timezone.now())
    return 1


def _send_or_log(name: str, args: list[Any], queue: str) -> bool:
    try:
        send(name, args, queue)
    except Exception:
        log.exception("could not enqueue %s%s on %s; the sweep sends it again", name, args, queue)
        return False
    return True


def send(name: str, args: list[Any], queue: str) -> None:
    """The one place that talks to the broker (tests replace it to see what was sent)."""
    log.info("enqueue %s%s on %s", name, args, queue)
    app.send_task(name, args=args, queue=queue)
