"""The Celery app: configured from Django settings (CELERY_*), with the tasks of `workers.tasks`.

Queues: `cpu` runs the torch backend, `gpu` runs verl (`webapp.runs.tasks` picks one per run); `ops` runs
housekeeping (the sweep of `webapp.runs.lifecycle`) on a schedule. Workers create the queues they consume.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings")

app = Celery("inspo", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
