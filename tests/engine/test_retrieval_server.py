"""The Search-R1-compatible /retrieve server, queried by our RemoteRetriever and by raw HTTP."""

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx
import pytest

from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.env.retrievers import BM25Retriever, RemoteRetriever
from inspo_engine.env.server import make_retrieval_server


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    return BM25Retriever(builtin_dataset().corpus)


@contextmanager
def _serving(retriever: Retriever) -> Iterator[str]:
    """The base URL of a server on a free port, running in a thread for the duration of the block."""
    server = make_retrieval_server(retriever, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def base_url(bm25: BM25Retriever) -> Iterator[str]:
    with _serving(bm25) as url:
        yield url


def test_remote_retriever_through_the_server_returns_what_the_retriever_returns(bm25: BM25Retriever, base_url: str):
    queries = ["What is the capital of Peru?", "Which currency is used in Japan?"]
    remote = RemoteRetriever(base_url)
    assert remote.search(queries, 3) == bm25.search(queries, 3)
    scored = remote.search_with_scores(queries, 2)
    assert scored == [[(p, pytest.approx(s)) for p, s in hits] for hits in bm25.search_with_scores(queries, 2)]
    assert RemoteRetriever(base_url, return_scores=False).search(queries, 3) == bm25.search(queries, 3)


def test_raw_requests_get_search_r1_documents_with_and_without_scores(base_url: str):
    body = {"queries": ["international calling code of Chile"], "topk": 3, "return_scores": True}
    scored = httpx.post(f"{base_url}/retrieve", json=body).json()["result"]
    assert len(scored) == 1 and len(scored[0]) == 3
    top = scored[0][0]
    assert set(top) == {"document", "score"} and isinstance(top["score"], float)
    assert top["document"]["id"] == "builtin-country-CHL"
    assert top["document"]["contents"].startswith('"Chile"\nChile, officially the Republic of Chile,')

    bare = httpx.post(f"{base_url}/retrieve", json={**body, "return_scores": False}).json()["result"]
    assert bare == [[item["document"] for item in scored[0]]]


def test_topk_defaults_to_three_and_return_scores_to_false(base_url: str):
    (hits,) = httpx.post(f"{base_url}/retrieve", json={"queries": ["Lima"]}).json()["result"]
    assert len(hits) == 3 and set(hits[0]) == {"id", "contents"}


def test_no_queries_get_an_empty_result(base_url: str):
    assert httpx.post(f"{base_url}/retrieve", json={"queries": [], "topk": 3}).json() == {"result": []}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"topk": 3}', "'queries' must be a list of strings"),
        (b'{"queries": "Lima"}', "'queries' must be a list of strings"),
        (b'{"queries": ["Lima"], "topk": 0}', "'topk' must be a positive integer"),
        (b'{"queries": ["Lima"], "topk": "3"}', "'topk' must be a positive integer"),
        (b'{"queries": ["Lima"], "topk": true}', "'topk' must be a positive integer"),
        (b'{"queries": ["Lima"], "return_scores": "yes"}', "'return_scores' must be true or false"),
    ],
)
def test_bad_bodies_get_400_with_a_json_error(base_url: str, body: bytes, message: str):
    response = httpx.post(f"{base_url}/retrieve", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_health_answers_ok_and_unknown_paths_404(base_url: str):
    assert httpx.get(f"{base_url}/health").json() == {"status": "ok"}
    missing = httpx.post(f"{base_url}/search", json={"queries": ["x"]})
    assert missing.status_code == 404 and "POST /retrieve" in missing.json()["error"]
    wrong_method = httpx.get(f"{base_url}/retrieve")
    assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "POST"


class _Unscored:
    """A retriever that only ranks, as the protocol requires; the server scores it by reciprocal rank."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[Passage(str(i), "T", q) for i in range(k)] for q in queries]


class _Broken:
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        raise RuntimeError("index gone")


@pytest.mark.slow
def test_a_retriever_without_scores_is_scored_by_reciprocal_rank():
    with _serving(_Unscored()) as url:
        body = {"queries": ["q"], "topk": 2, "return_scores": True}
        (hits,) = httpx.post(f"{url}/retrieve", json=body).json()["result"]
        assert [h["score"] for h in hits] == [1.0, 0.5]


@pytest.mark.slow
def test_a_failing_retriever_gives_500_with_the_reason():
    with _serving(_Broken()) as url:
        response = httpx.post(f"{url}/retrieve", json={"queries": ["q"]})
        assert response.status_code == 500 and "index gone" in response.json()["error"]
