"""The Celery app: configured from Django settings (CELERY_*), with the tasks of `workers.tasks`.

Queues: `cpu` runs the torch backend, `gpu` runs verl (`webapp.runs.tasks` picks one per run); `ops` runs
housekeeping (the sweep of `webapp.runs.lifecycle`) on a schedule. Workers create the queues they consume.

A worker's log of a clean run holds no WARNING or ERROR line (docs/platform.md, "Worker logs"): at start-up
(`quiet_worker_start`, before the pool forks) the worker turns off the progress bars of transformers and the Hub
(Celery logs whatever a task writes to stdout or stderr at WARNING: each refresh of a bar was a line), keeps faiss's
loader at WARNING (its INFO lines tell how it tried the AVX512 and AVX2 builds, each with a ModuleNotFoundError), and
does not repeat Celery's warning against running as root: that warning is about pickle, which these workers refuse
(CELERY_ACCEPT_CONTENT is JSON only), and a container often runs as root. Running as another user is still better.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import celeryd_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings")

app = Celery("inspo", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")

# Celery warns at its start, before any signal a worker could connect to, so the filter is set when the app loads
# (`celery -A webapp.config.celery`); elsewhere the warning is never raised.
ROOT_WARNING = "You're running the worker with superuser privileges"
warnings.filterwarnings("ignore", message=ROOT_WARNING, category=SecurityWarning)

QUIET_LOGGERS = ("faiss.loader",)
"""Loggers a worker keeps at WARNING: their INFO lines are noise on every start."""


def quiet_worker_start(**kwargs: Any) -> None:
    """In a worker's main process as it starts, before its pool forks: no progress bars, quiet loaders."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:  # imported already: the environment variable is read on import
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


celeryd_init.connect(quiet_worker_start, weak=False)
