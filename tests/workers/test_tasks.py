"""The Celery tasks of queued rows: each listens on the name the web app sends it by, and all are acknowledged late
and retried on database errors only."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

from webapp.runs.tasks import TASKS
from workers.tasks import evaluate, evaluate_heatmap, run_training


def test_every_queued_row_has_a_task_under_the_name_the_web_app_sends_it_by():
    assert {task.name for task in (run_training, evaluate, evaluate_heatmap)} == set(TASKS.values())


def test_a_claimed_task_is_acknowledged_late_and_retried_on_database_errors_only():
    for task in (run_training, evaluate, evaluate_heatmap):
        assert task.acks_late and task.max_retries == 3 and task.retry_backoff == 5
        assert tuple(task.autoretry_for) == (OperationalError, InterfaceError)
