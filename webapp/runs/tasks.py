"""Hands runs' work to Celery once the surrounding transaction commits, on the queue the run's backend needs.

The tasks themselves live in `workers.tasks`; they are sent by name so the web process never imports the engine's
training stack.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from webapp.config.celery import app

from .models import EvaluationRequest, Run

log = logging.getLogger(__name__)

TRAINING_TASK = "workers.tasks.run_training"
EVALUATION_TASK = "workers.tasks.evaluate"


def training_enqueue(run: Run) -> None:
    run_id, queue = str(run.pk), run.queue
    transaction.on_commit(lambda: send(TRAINING_TASK, [run_id], queue))


def evaluation_enqueue(request: EvaluationRequest) -> None:
    request_id, queue = request.pk, request.run.queue
    transaction.on_commit(lambda: send(EVALUATION_TASK, [request_id], queue))


def send(name: str, args: list[Any], queue: str) -> None:
    """The one place that talks to the broker (tests replace it to see what was sent)."""
    log.info("enqueue %s%s on %s", name, args, queue)
    app.send_task(name, args=args, queue=queue)
