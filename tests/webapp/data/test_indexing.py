"""Index jobs across teams: the same corpus bytes are indexed once, but each team sees only a job of its own — its
id, its dataset, its name — never another team's; one team's cancel or delete does not stop the build another team
waits for."""

from __future__ import annotations

import pytest

from tests.webapp.data.conftest import corpus, jsonl, upload
from webapp.data.indexing import (
    INDEX_TASK,
    index_job_claim,
    index_job_end,
    index_job_progress,
    index_job_release,
    run_index_wait,
)
from webapp.data.models import Dataset, IndexJob, IndexWait
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_corpora(alice, bob, api):
    """The same passages uploaded by alice as data:alices-corpus and by bob as data:bobs-corpus."""
    for user, name in ((alice, "alices-corpus"), (bob, "bobs-corpus")):
        response = upload(api(user), jsonl(corpus(6)), filename="c.jsonl", name=name, kind="corpus")
        assert response.status_code == 201, response.json()
    return Dataset.objects.get(name="alices-corpus"), Dataset.objects.get(name="bobs-corpus")


def start(client, dataset, capture):
    with capture(execute=True):
        return client.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "bm25"}, format="json")


def test_bob_gets_a_job_of_his_own_that_shares_alices_build(
    alice, bob, api, two_corpora, enqueued, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks)
    his = start(api(bob), bobs, django_capture_on_commit_callbacks)
    assert hers.status_code == 201 and his.status_code == 201, his.json()
    assert his.json()["id"] != hers.json()["id"]
    assert enqueued == [(INDEX_TASK, [hers.json()["id"]], "cpu")]  # one build
    assert api(bob).get(f"/api/v1/index-jobs/{his.json()['id']}/").status_code == 200
    assert api(bob).get(f"/api/v1/index-jobs/{hers.json()['id']}/").status_code == 404
    detail = api(bob).get(f"/api/v1/datasets/{bobs.pk}/").json()
    assert [job["id"] for job in detail["index_jobs"]] == [his.json()["id"]]
    assert "alice" not in str(his.json()) and "alice" not in str(detail)
    again = start(api(bob), bobs, django_capture_on_commit_callbacks)
    assert again.status_code == 200 and again.json()["id"] == his.json()["id"]

    claimed = index_job_claim(job_id=hers.json()["id"])
    assert claimed is not None and index_job_progress(job_id=claimed.build, done=3, total=6, rate=2.0)
    body = api(bob).get(f"/api/v1/index-jobs/{his.json()['id']}/").json()
    assert (body["status"], body["passages_done"], body["passages_total"]) == ("running", 3, 6)
    index_job_end(job_id=claimed.build)
    assert api(bob).get(f"/api/v1/index-jobs/{his.json()['id']}/").json()["status"] == "done"
    assert set(IndexJob.objects.values_list("status", flat=True)) == {"done"}


def test_a_corpus_already_indexed_elsewhere_gets_a_done_job_at_once(
    alice, bob, api, two_corpora, enqueued, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks).json()
    index_job_claim(job_id=hers["id"])
    index_job_end(job_id=hers["id"])
    his = start(api(bob), bobs, django_capture_on_commit_callbacks)
    assert his.status_code == 201 and his.json()["status"] == "done" and his.json()["id"] != hers["id"]
    assert len(enqueued) == 1


def test_bobs_waiting_run_names_his_dataset_and_is_released_when_the_shared_build_ends(
    alice, bob, bob_team, api, client, two_corpora, enqueued, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks).json()
    overrides = {"env.corpus": "data:bobs-corpus", "env.retriever": "bm25", "eval.benchmarks": ["builtin"]}
    created = api(bob).post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")
    assert created.status_code == 201, created.json()
    run = Run.objects.get(pk=created.json()["id"])
    job = run_index_wait(run)
    assert job is not None and job.version.dataset == bobs and job.pk != hers["id"]
    client.force_login(bob)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Waiting for the bm25 index of" in page and "data:bobs-corpus" in page
    assert "alices-corpus" not in page and f"/data/{alices.pk}/" not in page
    index_job_claim(job_id=hers["id"])
    index_job_end(job_id=hers["id"])
    assert index_job_release(hers["id"]) == 1 and not IndexWait.objects.exists()


def test_alices_cancel_or_delete_does_not_stop_the_build_bob_waits_for(
    alice, bob, api, two_corpora, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks).json()
    his = start(api(bob), bobs, django_capture_on_commit_callbacks).json()
    assert api(alice).post(f"/api/v1/index-jobs/{hers['id']}/cancel/").json()["status"] == "cancelled"
    assert index_job_claim(job_id=hers["id"]) is not None  # bob's job still wants the build
    assert api(alice).delete(f"/api/v1/datasets/{alices.pk}/").status_code == 204
    assert index_job_progress(job_id=hers["id"], done=6, total=6)
    index_job_end(job_id=hers["id"])
    assert api(bob).get(f"/api/v1/index-jobs/{his['id']}/").json()["status"] == "done"
    assert api(bob).post(f"/api/v1/index-jobs/{his['id']}/cancel/").status_code == 409


def test_the_build_stops_once_every_job_that_shares_it_is_cancelled(
    alice, bob, api, two_corpora, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks).json()
    his = start(api(bob), bobs, django_capture_on_commit_callbacks).json()
    index_job_claim(job_id=hers["id"])
    api(alice).post(f"/api/v1/index-jobs/{hers['id']}/cancel/")
    assert index_job_progress(job_id=hers["id"], done=1, total=6)
    api(bob).post(f"/api/v1/index-jobs/{his['id']}/cancel/")
    assert not index_job_progress(job_id=hers["id"], done=2, total=6)


def test_a_failed_shared_build_tells_bob_it_failed_without_alices_dataset(
    alice, bob, api, two_corpora, django_capture_on_commit_callbacks
):
    alices, bobs = two_corpora
    hers = start(api(alice), alices, django_capture_on_commit_callbacks).json()
    his = start(api(bob), bobs, django_capture_on_commit_callbacks).json()
    index_job_claim(job_id=hers["id"])
    index_job_end(job_id=hers["id"], error="DataUnavailable: data:alices-corpus v1: its file cannot be read")
    assert "alices-corpus" in api(alice).get(f"/api/v1/index-jobs/{hers['id']}/").json()["error"]
    body = api(bob).get(f"/api/v1/index-jobs/{his['id']}/").json()
    assert body["status"] == "failed" and body["error"] == "the index could not be built (DataUnavailable)"
