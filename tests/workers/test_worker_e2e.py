"""End to end: a real Celery worker process on Redis trains the `smoke` preset with the real torch backend, and
the database then holds its steps, population history, lineage with critiques, a checkpoint whose sha256 matches
the archive the API streams, and a best instruction that downloads."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.db import connection

from webapp.runs import tasks as run_tasks
from webapp.runs.models import Checkpoint, EvolutionRound, PopulationSnapshot, Run, StepMetric

REPO = Path(__file__).resolve().parents[2]
REAL_SEND = run_tasks.send
TIMEOUT_S = float(os.environ.get("INSPO_E2E_TIMEOUT_S", "2400"))


def database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def worker(redis_url, tmp_path):
    """A `celery worker` process on the cpu queue, pointed at the test database and a clean Redis database."""
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


def wait_until_done(run_id, process, log) -> Run:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in (Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED):
            return run
        if process.poll() is not None:
            pytest.fail(f"the worker exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(2)
    pytest.fail(f"the run did not finish in {TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_trains_the_smoke_preset_and_everything_lands_in_the_database(worker, alice, api, monkeypatch):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    process, log = worker
    client = api(alice)
    created = client.post("/api/v1/runs/", {"name": "e2e smoke", "preset": "smoke"}, format="json")
    assert created.status_code == 201, created.content
    run = wait_until_done(created.json()["id"], process, log)
    assert run.status == Run.Status.FINISHED, f"{run.error}\n{log.read_text()[-4000:]}"
    assert run.worker.startswith("cpu-e2e@") and run.step == run.total_steps == 4

    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3, 4]
    assert PopulationSnapshot.objects.filter(run=run, reason="step").count() == 4
    assert client.get(f"/api/v1/runs/{run.pk}/population/").json()["snapshots"][-1]["members"]
    lineage = client.get(f"/api/v1/runs/{run.pk}/lineage/").json()
    assert lineage["nodes"][0]["origin"] == "seed"
    assert EvolutionRound.objects.filter(run=run).exclude(critique="").exists()
    assert any(r["critique"] for r in lineage["rounds"])
    assert client.get(f"/api/v1/runs/{run.pk}/metrics/").json()["step"] == [1, 2, 3, 4]

    checkpoint = Checkpoint.objects.filter(run=run, available=True).order_by("-step").first()
    assert checkpoint is not None and checkpoint.step == 4 and len(checkpoint.sha256) == 64
    archive = client.get(f"/api/v1/runs/{run.pk}/checkpoints/{checkpoint.pk}/archive/")
    digest, size = hashlib.sha256(), 0
    for chunk in archive.streaming_content:
        digest.update(chunk)
        size += len(chunk)
    assert digest.hexdigest() == checkpoint.sha256 and size == int(archive["Content-Length"])
    assert any(f["name"].endswith("model.safetensors") for f in checkpoint.files)

    text = client.get(f"/api/v1/runs/{run.pk}/best-instruction.txt")
    assert text.status_code == 200 and text.content.decode().strip() == run.best_instruction.text.strip()
    best = client.get(f"/api/v1/runs/{run.pk}/best-instruction/").json()
    assert best["instruction"]["lineage"][-1]["origin"] == "seed" and best["config"]["grpo"]["total_steps"] == 4
