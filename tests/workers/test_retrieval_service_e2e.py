"""End to end: a real Celery worker trains a run whose retriever is the retrieval service, started as `make run` starts
it (`manage.py retrieval_service` beside the worker, INSPO_RETRIEVAL_URL in the worker's environment), and a run
whose service is gone fails with a clear error after its retries, never a hang. (The tiny random Llama seldom writes
a <search>, so the first test checks the searches the run made at its start; a service killed between two searches
is tests/engine/test_retrieval_service.py's.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.celery_worker import REPO, celery_worker, wait_until_done
from tests.conftest import tiny_model_path
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Run

REAL_SEND = run_tasks.send


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def service(settings: Any, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    env = {**os.environ, "INSPO_CACHE_DIR": str(settings.INSPO_CACHE_DIR), "INSPO_RETRIEVAL_PORT": str(port)}
    log = (tmp_path / "retrieval.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "retrieval_service"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        pytest.fail(f"the retrieval service did not answer:\n{(tmp_path / 'retrieval.log').read_text()[-3000:]}")
    yield process, url
    process.kill()
    process.wait()


@pytest.fixture
def service_worker(
    service: tuple[subprocess.Popen[bytes], str], redis_url: str, tmp_path: Path, settings: Any, tiny_data_dir: Path
) -> Iterator[Any]:
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    env = {
        "INSPO_DATA_DIR": str(tiny_data_dir),
        "INSPO_CACHE_DIR": str(settings.INSPO_CACHE_DIR),
        "INSPO_RETRIEVAL_URL": service[1],
    }
    yield from celery_worker(redis_url, tmp_path, env=env)


def _submit(api: Any, alice: Any, settings: Any, name: str) -> str:
    overrides = {"backend.model": tiny_model_path(settings), "env.retriever": "bm25"}
    created = api(alice).post("/api/v1/runs/", {"name": name, "preset": "smoke", "overrides": overrides}, format="json")
    assert created.status_code == 201, created.content
    return str(created.json()["id"])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_runs_search_through_the_retrieval_service_make_run_starts_and_fail_clearly_without_it(
    service: tuple[subprocess.Popen[bytes], str],
    service_worker: Any,
    alice: Any,
    api: Any,
    monkeypatch: Any,
    settings: Any,
) -> None:
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    process, log = service_worker
    run = wait_until_done(_submit(api, alice, settings, "through the service"), process, log)
    assert run.status == Run.Status.FINISHED, f"{run.error}\n{log.read_text()[-4000:]}"
    report = httpx.get(f"{service[1]}/indexes", timeout=10).json()
    served = [entry for entry in report["indexes"] if entry["open"] and entry["method"] == "bm25"]
    assert served and sum(entry["requests"] for entry in served) > 0, report  # the run's searches reached it
    assert served[0]["passages"] > 0 and served[0]["size_bytes"] > 0

    service[0].kill()  # as a crashed or stopped service: the connection is refused from now on
    service[0].wait()
    run = wait_until_done(_submit(api, alice, settings, "service killed"), process, log)
    assert run.status == Run.Status.FAILED, log.read_text()[-4000:]
    assert "cannot reach the retriever at http://127.0.0.1:" in run.error and "(5 attempts)" in run.error, run.error
