"""End to end: a real Celery worker process on Redis trains the `smoke` preset with the real torch backend (on the
tiny random-weight Llama: SmolLM2's weights are not the point here; the CLI's smoke test trains SmolLM2), and
the database then holds its steps, population history, lineage with critiques, a checkpoint whose sha256 matches
the archive the API streams, and a best instruction that downloads; and the worker's log of that clean run, of a
SIGTERM to its idle pool child (as a process-group kill sends) and of its clean stop (SIGTERM) holds no ERROR or
WARNING line."""

from __future__ import annotations

import hashlib
import re
import signal

import psutil
import pytest

from tests.celery_worker import wait_until_done
from tests.conftest import tiny_model_path
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Checkpoint, EvolutionRound, PopulationSnapshot, Run, StepMetric

REAL_SEND = run_tasks.send


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_trains_the_smoke_preset_and_everything_lands_in_the_database(
    worker, alice, api, monkeypatch, settings
):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    process, log = worker
    client = api(alice)
    model = {"backend.model": tiny_model_path(settings), "env.retriever": "bm25"}
    created = client.post("/api/v1/runs/", {"name": "e2e smoke", "preset": "smoke", "overrides": model}, format="json")
    assert created.status_code == 201, created.content
    run = wait_until_done(created.json()["id"], process, log)
    assert run.status == Run.Status.FINISHED, f"{run.error}\n{log.read_text()[-4000:]}"
    assert run.worker.startswith("cpu-e2e@") and run.step == run.total_steps == 4

    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3, 4]
    assert PopulationSnapshot.objects.filter(run=run, reason="step").count() == 4
    population = client.get(f"/api/v1/runs/{run.pk}/population/").json()
    last = len(population["snapshots"]["step"]) - 1
    assert any(
        entry["start"] + len(entry["weight"]) > last and entry["weight"][last - entry["start"]] is not None
        for entry in population["instructions"]
    )  # the last snapshot has living members
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

    idle = psutil.Process(process.pid).children()  # the pool's child, idle now: a group's SIGTERM reaches it too
    assert idle
    for child in idle:
        child.send_signal(signal.SIGTERM)  # it exits quietly, and the main process replaces it
    psutil.wait_procs(idle, timeout=10)
    process.send_signal(signal.SIGTERM)  # a clean stop, as make run's and docker's
    assert process.wait(timeout=60) == 0, log.read_text()[-4000:]
    noise = re.compile(r" (ERROR|WARNING|CRITICAL)/|\w+Warning: |Traceback")  # logged, or a Python warning
    assert not [line for line in log.read_text().splitlines() if noise.search(line)], log.read_text()[-4000:]
