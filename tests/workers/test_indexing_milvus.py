"""With INSPO_RETRIEVAL_ENGINE=milvus, an index job writes the corpus into the Milvus collection of its index's name
and the retrieval service answers from it: the same client code as against a Milvus server, here milvus-lite
(Milvus's own core, started as a process)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inspo_engine.env.indexes import index_name
from inspo_engine.env.milvus import MilvusRetriever, collection_for_index
from inspo_engine.env.retrievers import RemoteRetriever
from inspo_engine.env.service import IndexShelf, make_service
from tests.engine.test_milvus import start_milvus_lite, stop
from webapp.data.models import DatasetVersion, IndexJob
from webapp.data.retrieval import milvus_settings
from workers.indexing import index_execute

from .test_data import CAPITALS, COUNTRIES, lines, post, storage  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def milvus(settings: Any, tmp_path: Path) -> Iterator[str]:
    (tmp_path / "milvus").mkdir()
    process, uri = start_milvus_lite(tmp_path / "milvus")
    settings.INSPO_RETRIEVAL_ENGINE = "milvus"
    settings.INSPO_MILVUS_URI = uri
    yield uri
    stop(process)


@pytest.mark.usefixtures("storage", "enqueued")
def test_an_index_job_writes_milvus_and_the_service_searches_it(
    alice: Any, api: Any, milvus: str, settings: Any
) -> None:
    records = [
        {"id": f"p{i}", "contents": f'"{country}"\nThe capital of {country} is {capital}.'}
        for i, (country, capital) in enumerate(zip(COUNTRIES, CAPITALS, strict=True))
    ]
    client = api(alice)
    assert post(client, lines(records), "w.jsonl", name="w", kind="corpus").status_code == 201
    dataset = DatasetVersion.objects.get().dataset
    started = client.post(f"/api/v1/datasets/{dataset.pk}/index/", {"method": "bm25"}, format="json")
    assert index_execute(job_id=started.json()["id"]) == "done"
    job = IndexJob.objects.get(pk=started.json()["id"])
    assert (job.passages_done, job.passages_total) == (8, 8)
    assert not (Path(settings.INSPO_CACHE_DIR) / "indexes").exists(), "Milvus scores BM25: no local index is built"

    name = index_name("bm25", DatasetVersion.objects.get().sha256)
    direct = MilvusRetriever(milvus_settings(), collection_for_index("inspo", name), method="bm25")
    assert direct.count() == 8

    def remote(index: str) -> MilvusRetriever:
        return MilvusRetriever(milvus_settings(), collection_for_index("inspo", index), method="bm25")

    server = make_service(IndexShelf(Path(settings.INSPO_CACHE_DIR) / "indexes", remote=remote), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/indexes/{name}/retrieve"
        hits = RemoteRetriever(url).search(["What is the capital of Kenya?", "capital of Japan"], 2)
        assert [h[0].id for h in hits] == ["p2", "p4"] and hits[0][0].text == "The capital of Kenya is Nairobi."
    finally:
        server.shutdown()
        server.server_close()
