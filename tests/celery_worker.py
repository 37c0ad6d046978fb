"""A real `celery worker` process for end-to-end tests, pointed at the test database and a clean Redis database,
and a wait for a run to reach a final status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from webapp.runs.models import Run

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = float(os.environ.get("INSPO_E2E_TIMEOUT_S", "2400"))


def database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def celery_worker(redis_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The `worker` fixture: a `celery worker` process on the cpu queue, on the test database and a clean Redis
    database."""
    redis.Redis.from_url(redis_url).flushdb()
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": redis_url,
        "INSPO_RUNS_DIR": str(tmp_path / "runs"),
        "INSPO_HEARTBEAT_S": "5",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "celery", "-A", "webapp.config.celery", "worker", "-Q", "cpu", "-c", "1"]
    command += ["-n", "cpu-e2e@%h", "--without-gossip", "--without-mingle", "-l", "INFO"]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_done(run_id: Any, process: subprocess.Popen[bytes], log: Path) -> Run:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in (Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED):
            return run
        if process.poll() is not None:
            pytest.fail(f"the worker exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(2)
    pytest.fail(f"the run did not finish in {TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")
