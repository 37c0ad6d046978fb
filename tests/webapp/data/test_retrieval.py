"""GET /api/v1/retrieval/: the retrieval service's memory and, per index of a corpus the caller's teams can see, its
size and latency, named by the caller's own data reference; another team's indexes are not listed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inspo_engine.env.indexes import build_index
from inspo_engine.env.retrievers import RemoteRetriever
from inspo_engine.env.service import IndexShelf, make_service
from webapp.data.models import DatasetVersion
from webapp.data.references import version_file

from .conftest import corpus, jsonl, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(settings: Any) -> Iterator[str]:
    server = make_service(IndexShelf(Path(settings.INSPO_CACHE_DIR) / "indexes"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.INSPO_RETRIEVAL_URL = f"http://127.0.0.1:{server.server_address[1]}"
    yield settings.INSPO_RETRIEVAL_URL
    server.shutdown()
    server.server_close()


def _indexed_corpus(client: Any, settings: Any, name: str, records: list[dict[str, Any]]) -> Path:
    assert upload(client, jsonl(records), "corpus.jsonl", name=name, kind="corpus").status_code == 201
    version = DatasetVersion.objects.get(dataset__name=name)
    cache = Path(settings.INSPO_CACHE_DIR)
    return build_index("bm25", version_file(version, cache), cache / "indexes")


def test_each_team_sees_the_indexes_of_its_own_corpora_only(
    api: Any, alice: Any, bob: Any, settings: Any, service: str
) -> None:
    folder = _indexed_corpus(api(alice), settings, "alicewiki", corpus(12))
    other = _indexed_corpus(api(bob), settings, "bobwiki", corpus(5))
    RemoteRetriever(f"{service}/indexes/{folder.name}/retrieve").search(["capital of country 3"], 3)

    mine = api(alice).get("/api/v1/retrieval/")
    assert mine.status_code == 200
    body = mine.json()
    assert body["service"] == "up" and body["engine"] == "embedded" and body["rss_bytes"] > 0
    assert [(i["name"], i["corpus"]) for i in body["indexes"]] == [(folder.name, "data:alicewiki@1")]
    assert body["indexes"][0]["queries"] == 1 and body["indexes"][0]["passages"] == 12
    theirs = api(bob).get("/api/v1/retrieval/").json()
    assert [(i["name"], i["corpus"]) for i in theirs["indexes"]] == [(other.name, "data:bobwiki@1")]
    assert "alicewiki" not in str(theirs) and folder.name not in str(theirs)


def test_without_a_service_it_says_so_and_a_dead_one_is_a_503(api: Any, alice: Any, settings: Any) -> None:
    settings.INSPO_RETRIEVAL_URL = ""
    assert api(alice).get("/api/v1/retrieval/").json() == {"service": None, "engine": "embedded", "indexes": []}
    settings.INSPO_RETRIEVAL_URL = "http://127.0.0.1:9"  # nothing listens there
    response = api(alice).get("/api/v1/retrieval/")
    assert response.status_code == 503 and "retrieval service" in response.json()["detail"]


def test_it_needs_a_signed_in_caller(client: Any) -> None:
    assert client.get("/api/v1/retrieval/").status_code in (401, 403)


def test_a_dense_job_on_the_cpu_queue_says_how_long_its_encoding_will_take(
    api: Any, alice: Any, settings: Any, enqueued: Any, django_capture_on_commit_callbacks: Any, client: Any
) -> None:
    settings.INSPO_DENSE_CPU_PASSAGES_PER_S = 2
    rest = api(alice)
    assert upload(rest, jsonl(corpus(12)), "corpus.jsonl", name="wiki", kind="corpus").status_code == 201
    dataset = DatasetVersion.objects.get().dataset
    with django_capture_on_commit_callbacks(execute=True):
        job = rest.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "dense"}, format="json").json()
    assert (job["queue"], job["estimate_s"]) == ("cpu", 6.0)  # 12 passages at 2 a second
    assert enqueued[-1][2] == "cpu"
    client.force_login(alice)
    page = client.get(f"/data/{dataset.pk}/")
    assert "encoding on the cpu queue (no GPU worker): about 1 min" in page.content.decode()

    settings.INSPO_DENSE_INDEX_QUEUE = "gpu"
    bm25 = rest.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "bm25"}, format="json").json()
    assert (bm25["queue"], bm25["estimate_s"]) == ("cpu", None)
    assert rest.get(f"/api/v1/index-jobs/{job['id']}/").json()["queue"] == "gpu"
