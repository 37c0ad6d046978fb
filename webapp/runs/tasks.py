"""Hands runs' work to Celery once the surrounding transaction commits, on the queue the run's backend needs.

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

from .models import EvaluationRequest, Heatmap, Run

log = logging.getLogger(__name__)

TRAINING_TASK = "workers.tasks.run_training"
EVALUATION_TASK = "workers.tasks.evaluate"
HEATMAP_TASK = "workers.tasks.evaluate_heatmap"


def training_enqueue(run: Run) -> None:
    transaction.on_commit(lambda: training_send(run))


def evaluation_enqueue(request: EvaluationRequest) -> None:
    transaction.on_commit(lambda: evaluation_send(request))


def heatmap_enqueue(heatmap: Heatmap) -> None:
    transaction.on_commit(lambda: heatmap_send(heatmap))


def training_send(run: Run) -> int:
    """Send the run's task now and note that the broker has it; 0 when the broker could not be reached."""
    if not _send_or_log(TRAINING_TASK, [str(run.pk)], run.queue):
        return 0
    Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED, enqueued_at__isnull=True).update(enqueued_at=timezone.now())
    return 1


def evaluation_send(request: EvaluationRequest) -> int:
    if not _send_or_log(EVALUATION_TASK, [request.pk], request.run.queue):
        return 0
    EvaluationRequest.objects.filter(
        pk=request.pk, status=EvaluationRequest.Status.QUEUED, enqueued_at__isnull=True
    ).update(enqueued_at=timezone.now())
    return 1


def heatmap_send(heatmap: Heatmap) -> int:
    if not _send_or_log(HEATMAP_TASK, [heatmap.pk], heatmap.run.queue):
        return 0
    Heatmap.objects.filter(pk=heatmap.pk, status=Heatmap.Status.QUEUED, enqueued_at__isnull=True).update(
        enqueued_at=timezone.now()
    )
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
