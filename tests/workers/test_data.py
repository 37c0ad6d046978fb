"""Uploaded data on a worker, end to end with curl-equivalent requests: a questions file (train and test), a corpus
and a benchmark go up through the API; a run that names them waits for its corpus's BM25 index job, which builds
with progress; then the run trains the tiny model on the uploaded questions, retrieves from the uploaded corpus and
is evaluated on the uploaded benchmark and on builtin, each evaluation named by the data it came from. A worker
fetches each version into its cache by sha256 and refuses a file that does not match it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.conftest import STUB_ENDPOINT
from webapp.data.indexing import INDEX_TASK
from webapp.data.models import DatasetVersion, IndexJob, IndexWait
from webapp.data.references import DataUnavailable, version_file
from webapp.runs.models import Evaluation, Run, StepMetric
from workers.indexing import index_execute
from workers.training import run_execute

pytestmark = pytest.mark.django_db


@pytest.fixture
def storage(settings, tmp_path, tiny_data_dir):
    settings.STORAGES = {
        **settings.STORAGES,
        "data": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "s")},
        },
    }
    settings.INSPO_CACHE_DIR = tmp_path / "cache"
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    settings.INSPO_HEARTBEAT_S = 1
    return tmp_path / "s"


def lines(records):
    return "".join(json.dumps(r) + "\n" for r in records).encode()


COUNTRIES = ["Peru", "Chile", "Kenya", "Norway", "Japan", "Egypt", "Canada", "Brazil"]
CAPITALS = ["Lima", "Santiago", "Nairobi", "Oslo", "Tokyo", "Cairo", "Ottawa", "Brasilia"]


def qa(indices, prefix):
    return [
        {"id": f"{prefix}{i}", "question": f"What is the capital of {COUNTRIES[i]}?", "golden_answers": [CAPITALS[i]]}
        for i in indices
    ]


def post(client, content, filename, **fields):
    return client.post(
        "/api/v1/datasets/", {**fields, "file": SimpleUploadedFile(filename, content)}, format="multipart"
    )


def test_a_run_trains_on_uploaded_questions_and_corpus_and_is_evaluated_on_an_uploaded_benchmark(
    alice, api, client, storage, tiny_data_dir, optimizer_gate, enqueued, django_capture_on_commit_callbacks
):
    page = client
    client = api(alice)
    passages = [
        {"id": f"p{i}", "contents": f'"{c}"\n{CAPITALS[i]} is the capital of {c}.'} for i, c in enumerate(COUNTRIES)
    ]
    assert post(client, lines(qa(range(6), "t")), "mine.jsonl", name="mine", kind="questions").status_code == 201
    assert (
        post(
            client,
            gzip.compress(lines(qa(range(6, 8), "x"))),
            "t.jsonl.gz",
            name="mine",
            kind="questions",
            split="test",
        ).status_code
        == 201
    )
    assert post(client, lines(passages), "wiki.jsonl", name="wiki", kind="corpus").status_code == 201
    assert (
        post(client, lines(qa(range(4), "b")), "bench.jsonl", name="bench", kind="questions", split="test").status_code
        == 201
    )

    overrides = {
        "backend.model": str(tiny_data_dir / "shared" / "tiny-llama"), "env.retriever": "bm25",
        "optimizer.provider": "gemini", "optimizer.model": "gemini-2.5-pro", "optimizer.endpoint": STUB_ENDPOINT,
        "optimizer.max_retries": 0, "total_steps": 2, "evolve_until": 2, "seed": 3,
        "env.dataset": "data:mine", "env.corpus": "data:wiki", "eval.benchmarks": ["data:bench", "builtin"],
        "eval.eval_samples": 4,
    }  # fmt: skip
    created = client.post(
        "/api/v1/runs/", {"name": "own data", "preset": "smoke", "overrides": overrides}, format="json"
    )
    assert created.status_code == 201, created.json()
    run_id = created.json()["id"]

    with django_capture_on_commit_callbacks(execute=True):
        assert run_execute(run_id=run_id) == "waiting"  # no index of wiki yet: a job is started, the run waits
    job = IndexJob.objects.get()
    assert (job.method, job.status) == ("bm25", "queued") and IndexWait.objects.filter(run_id=run_id).exists()
    assert (INDEX_TASK, [job.pk], "cpu") in enqueued
    assert Run.objects.get(pk=run_id).status == Run.Status.QUEUED
    assert run_execute(run_id=run_id) == "waiting"  # asked again, it still waits for the same job
    page.force_login(alice)
    banner = page.get(f"/runs/{run_id}/").content.decode()
    assert "Waiting for the bm25 index of" in banner and "data:wiki" in banner and "0 of … passages" in banner
    assert IndexJob.objects.count() == 1

    assert index_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert (job.passages_done, job.passages_total) == (8, 8) and job.rate and job.rate > 0
    assert not IndexWait.objects.exists() and [args for _, args, _ in enqueued][-1] == [run_id]  # sent again
    assert client.get(f"/api/v1/index-jobs/{job.pk}/").json()["status"] == "done"

    assert run_execute(run_id=run_id) == "finished"
    run = Run.objects.get(pk=run_id)
    assert StepMetric.objects.filter(run=run).count() == 2
    assert set(Evaluation.objects.filter(run=run).values_list("benchmark", flat=True)) == {"data:bench@1", "builtin"}
    bench = Evaluation.objects.filter(run=run, benchmark="data:bench@1", metric="em").latest("step")
    assert bench.n == 4
    detail = client.get(f"/api/v1/datasets/{DatasetVersion.objects.get(split='corpus').dataset_id}/").json()
    assert [r["name"] for r in detail["runs"]] == ["own data"]


def test_a_version_whose_stored_file_was_changed_is_refused_by_the_worker(alice, api, storage, tmp_path):
    client = api(alice)
    post(client, lines(qa(range(3), "q")), "q.jsonl", name="q", kind="questions")
    version = DatasetVersion.objects.get()
    (storage / version.file).write_bytes(lines(qa(range(2), "q")))
    with pytest.raises(DataUnavailable, match="does not match its sha256"):
        version_file(version, Path(tmp_path / "cache"))
    assert not list((tmp_path / "cache" / "data" / "blobs").glob("*.jsonl"))


def test_a_cancelled_index_job_stops_and_its_runs_go_on(
    alice, api, storage, enqueued, django_capture_on_commit_callbacks
):
    client = api(alice)
    post(
        client,
        lines([{"id": f"p{i}", "contents": f"passage {i}"} for i in range(5)]),
        "w.jsonl",
        name="w",
        kind="corpus",
    )
    dataset = DatasetVersion.objects.get().dataset
    with django_capture_on_commit_callbacks(execute=True):
        started = client.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "bm25"}, format="json")
    assert enqueued == [(INDEX_TASK, [started.json()["id"]], "cpu")]
    assert started.status_code == 201 and started.json()["status"] == "queued"
    assert client.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "bm25"}, format="json").status_code == 200
    cancelled = client.post(f"/api/v1/index-jobs/{started.json()['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert index_execute(job_id=started.json()["id"]) == "skipped"
    assert client.post(f"/api/v1/index-jobs/{started.json()['id']}/cancel/").status_code == 409
