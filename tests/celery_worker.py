"""Real `celery worker` processes for end-to-end tests, pointed at the test database and a clean Redis database,
and a wait for a run to reach a final status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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


@dataclass
class WorkerProcess:
    """A `celery worker` in its own process group (its pool's children with it), and its log."""

    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if " ready." in self.log.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                pytest.fail(f"the worker exited with {self.process.returncode}:\n{self.tail()}")
            time.sleep(0.2)
        pytest.fail(f"the worker was not ready after {timeout:.0f} s:\n{self.tail()}")

    def signal(self, sig: int, *, group: bool = False) -> None:
        """To the main process (as `docker stop` does), or to the whole group (a Ctrl-C'd `make run`, systemd)."""
        if group:
            os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)

    def kill(self) -> None:
        """kill -9, the main process and its pool at once."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within {timeout:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def start_worker(
    tmp_path: Path,
    *,
    name: str = "cpu-e2e@%h",
    queues: str = "cpu",
    env: Mapping[str, str] | None = None,
    beat: bool = False,
    log_name: str = "worker.log",
) -> WorkerProcess:
    """A `celery worker` on `queues` with one pool process; `beat` adds the scheduler (the sweep)."""
    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "INSPO_RUNS_DIR": str(tmp_path / "runs"),
        "INSPO_HEARTBEAT_S": "5",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    command = [sys.executable, "-m", "celery", "-A", "webapp.config.celery", "worker", "-Q", queues, "-c", "1"]
    command += ["-n", name, "--without-gossip", "--without-mingle", "-l", "INFO"]
    if beat:
        command += ["-B", "--schedule", str(tmp_path / f"{log_name}.beat-schedule")]
    log = tmp_path / log_name
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return WorkerProcess(process, log)


def celery_worker(
    redis_url: str, tmp_path: Path, env: Mapping[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The `worker` fixture: a `celery worker` process on the cpu queue, on the test database and a clean Redis
    database, with `env` added to its environment."""
    redis.Redis.from_url(redis_url).flushdb()
    worker = start_worker(tmp_path, env={"CELERY_BROKER_URL": redis_url, **(env or {})})
    try:
        yield worker.process, worker.log
    finally:
        worker.stop()


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
