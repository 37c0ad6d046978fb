"""Dense, BM25 and remote retrievers: recall on built-in questions, on-disk caches, and the /retrieve wire format."""

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pytest_httpserver import HTTPServer

from inspo_engine.env.builtin import builtin_dataset, question_kind
from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.env.retrievers import (
    BM25Retriever,
    DenseRetriever,
    PooledEncoder,
    RemoteRetriever,
    RetrieverError,
    _encoder,
    _passage_text,
    build_retriever,
    default_model_path,
    embed_texts,
    retrieve_url,
)
from inspo_engine.netpolicy import NetPolicy, UrlRefused
from inspo_engine.types import Question

RECALL_FLOOR = 0.9  # both measured 1.00 on these 100 questions (dense and BM25); the floor leaves room for noise
TINY = [
    Passage("a", "Lima", "Lima is the capital city of Peru."),
    Passage("b", "Peru", "The currency of Peru is the Sol (PEN)."),
    Passage("c", "Japan", "The currency of Japan is the Yen (JPY)."),
    Passage("d", "Chile", "The international calling code of Chile is +56."),
]


def _single_hop_sample(n: int = 100) -> list[Question]:
    questions = [q for q in builtin_dataset().train if question_kind(q) == "single"]
    return questions[:: len(questions) // n][:n]


def _recall_at_3(retriever: Retriever, questions: list[Question]) -> float:
    evidence = builtin_dataset().evidence
    results = retriever.search([q.text for q in questions], 3)
    hits = [set(evidence[q.id]) <= {p.id for p in passages} for q, passages in zip(questions, results, strict=True)]
    return sum(hits) / len(hits)


@pytest.fixture(scope="module")
def dense_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kept in pytest's cache between runs when it is on, so only the first run encodes the whole corpus."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("inspo-dense-index") if cache is not None else tmp_path_factory.mktemp("dense")


# -- recall ---------------------------------------------------------------------------------------------------


def test_bm25_finds_the_supporting_passage_of_builtin_single_hop_questions():
    questions = _single_hop_sample()
    recall = _recall_at_3(BM25Retriever(builtin_dataset().corpus), questions)
    print(f"\nBM25 recall@3 on {len(questions)} built-in single-hop questions: {recall:.2f}")
    assert recall >= RECALL_FLOOR


@pytest.mark.weights
def test_dense_finds_the_supporting_passage_of_builtin_single_hop_questions(dense_cache: Path):
    questions = _single_hop_sample()
    recall = _recall_at_3(DenseRetriever(builtin_dataset().corpus, cache_dir=dense_cache), questions)
    print(f"\ndense recall@3 on {len(questions)} built-in single-hop questions: {recall:.2f}")
    assert recall >= RECALL_FLOOR


# -- dense ----------------------------------------------------------------------------------------------------


@pytest.mark.weights
def test_a_second_dense_retriever_over_the_same_corpus_loads_the_cache_instead_of_encoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    query = ["Which currency is used in Japan?"]
    first = DenseRetriever(TINY, cache_dir=tmp_path)
    assert (first.loaded_from_cache, first.encoded_passages) == (False, len(TINY))
    first_hits = first.search(query, 2)
    files = sorted(tmp_path.iterdir())
    assert [f.suffix for f in files] == [".faiss", ".npy"]
    stamps = [f.stat().st_mtime_ns for f in files]

    encoded: list[int] = []
    original = DenseRetriever._encode

    def counting_encode(self: DenseRetriever, texts: list[str]):
        encoded.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(DenseRetriever, "_encode", counting_encode)
    second = DenseRetriever(TINY, cache_dir=tmp_path)
    assert (second.loaded_from_cache, second.encoded_passages, encoded) == (True, 0, [])
    assert [f.stat().st_mtime_ns for f in sorted(tmp_path.iterdir())] == stamps
    assert second.search(query, 2) == first_hits
    assert encoded == [1]  # only the query was encoded


@pytest.mark.weights
def test_a_changed_passage_means_a_new_dense_cache_entry(tmp_path: Path):
    DenseRetriever(TINY, cache_dir=tmp_path)
    edited = [*TINY[:-1], Passage("d", "Chile", "Chile's calling code is +56.")]
    again = DenseRetriever(edited, cache_dir=tmp_path)
    assert not again.loaded_from_cache
    assert len(list(tmp_path.glob("*.faiss"))) == 2


@pytest.mark.weights
def test_dense_scores_are_cosines_best_first_and_k_is_capped_by_the_corpus():
    (hits,) = DenseRetriever(TINY).search_with_scores(["What is the capital of Peru?"], 10)
    assert len(hits) == len(TINY)
    assert hits[0][0].title == "Lima"
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0001 <= s <= 1.0001 for s in scores)


@pytest.mark.weights
def test_the_plain_encoder_gives_sentence_transformers_vectors_for_minilm():
    from sentence_transformers import SentenceTransformer

    texts = [_passage_text(p) for p in builtin_dataset().corpus[:40]] + ["Which currency is used in Japan?", "x"]
    ours = embed_texts(texts)
    assert isinstance(_encoder(str(default_model_path()), None), PooledEncoder)
    theirs = SentenceTransformer(str(default_model_path()), device="cpu", local_files_only=True).encode(
        texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    assert ours.shape == theirs.shape == (42, 384)
    assert np.abs(ours - theirs).max() < 1e-5


@pytest.mark.weights
def test_dense_retrieval_does_not_import_sentence_transformers():
    """The library pulls in scikit-learn; a training process that retrieves need not hold it."""
    code = (
        "import sys\n"
        "from inspo_engine.env.retrievers import DenseRetriever, embed_texts\n"
        "from inspo_engine.env.protocol import Passage\n"
        "r = DenseRetriever([Passage('1', 'Peru', 'Lima is the capital of Peru.'), Passage('2', 'Japan', 'Yen.')])\n"
        "assert r.search(['capital of Peru'], 1)[0][0].id == '1'\n"
        "embed_texts(['a'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sentence_transformers', 'sklearn')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.weights
def test_a_model_of_another_kind_goes_through_sentence_transformers(tmp_path: Path):
    """A Pooling with max tokens is not what the plain encoder computes, so it is not used for it."""
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}
        )
    )
    assert PooledEncoder.of(model, None) is None
    assert PooledEncoder.of(tmp_path / "nowhere", None) is None
    vectors = embed_texts(["capital of Peru"], model_path=model)
    assert vectors.shape == (1, 384) and abs(float(np.linalg.norm(vectors)) - 1) < 1e-5


# -- BM25 -----------------------------------------------------------------------------------------------------


def test_bm25_ranks_by_shared_words_and_answers_queries_with_no_known_word():
    retriever = BM25Retriever(TINY)
    [[yen]], [nothing] = retriever.search(["yen currency Japan"], 1), retriever.search(["the of and"], 2)
    assert yen.title == "Japan"
    assert len(nothing) == 2
    assert retriever.search([], 3) == []
    assert len(retriever.search(["Peru"], 99)[0]) == len(TINY)


def test_bm25_refuses_a_corpus_without_a_single_indexable_word():
    with pytest.raises(ValueError, match="no words to index"):
        BM25Retriever([Passage("1", "a", "the of")])


def test_bm25_reuses_its_saved_index(tmp_path: Path):
    first = BM25Retriever(TINY, cache_dir=tmp_path)
    second = BM25Retriever(TINY, cache_dir=tmp_path)
    assert (first.loaded_from_cache, second.loaded_from_cache) == (False, True)
    queries = ["capital of Peru", "calling code Chile", "zzz"]
    assert second.search_with_scores(queries, 2) == first.search_with_scores(queries, 2)


# -- remote ---------------------------------------------------------------------------------------------------


def _document(passage: Passage) -> dict[str, str]:
    return {"id": passage.id, "contents": f'"{passage.title}"\n{passage.text}'}


def test_remote_sends_search_r1_requests_and_reads_scored_results(httpserver: HTTPServer):
    expected = {"queries": ["capital of Peru", "yen"], "topk": 2, "return_scores": True}
    httpserver.expect_request("/retrieve", method="POST", json=expected).respond_with_json(
        {"result": [[{"document": _document(TINY[0]), "score": 0.9}], [{"document": _document(TINY[2]), "score": 1}]]}
    )
    retriever = RemoteRetriever(httpserver.url_for("/"))
    assert retriever.url.endswith("/retrieve")
    assert retriever.search_with_scores(["capital of Peru", "yen"], 2) == [[(TINY[0], 0.9)], [(TINY[2], 1.0)]]


def test_remote_reads_bare_documents_and_bm25_style_documents_without_ids(httpserver: HTTPServer):
    bare = {"title": "Peru", "text": "The currency of Peru is the Sol (PEN).", "contents": '"Peru"\nThe currency…'}
    httpserver.expect_request("/retrieve").respond_with_json({"result": [[_document(TINY[3]), bare]]})
    (hits,) = RemoteRetriever(httpserver.url_for("/retrieve"), return_scores=False).search(["code"], 2)
    assert hits[0] == TINY[3]
    assert (hits[1].title, hits[1].text) == ("Peru", "The currency…")
    assert hits[1].id.startswith("remote-")


@pytest.mark.parametrize(
    ("respond", "message"),
    [
        (lambda r: r.respond_with_data("oops", status=500), "answered HTTP 500"),
        (lambda r: r.respond_with_data("{not json", content_type="application/json"), "malformed JSON"),
        (lambda r: r.respond_with_json({"result": []}), "no 'result' list per query"),
        (lambda r: r.respond_with_json({"result": [[{"document": {"id": "x"}, "score": 1}]]}), "without 'contents'"),
    ],
)
def test_remote_errors_name_the_url(httpserver: HTTPServer, respond, message: str):
    respond(httpserver.expect_request("/retrieve"))
    url = httpserver.url_for("/retrieve")
    with pytest.raises(RetrieverError, match=message) as caught:
        RemoteRetriever(url).search(["q"], 3)
    assert url in str(caught.value)


@pytest.mark.parametrize(
    "respond",
    [
        lambda r: r.respond_with_data("db password is hunter2", status=500),
        lambda r: r.respond_with_data("db password is hunter2", content_type="application/json"),
        lambda r: r.respond_with_json({"db password is hunter2": []}),
        lambda r: r.respond_with_json({"result": [["db password is hunter2"]]}),
        lambda r: r.respond_with_json({"result": [[{"document": {"id": "db password is hunter2"}, "score": 1}]]}),
    ],
    ids=["status", "malformed", "no-result", "not-a-document", "no-contents"],
)
def test_remote_errors_never_echo_what_the_server_wrote(httpserver: HTTPServer, respond):
    respond(httpserver.expect_request("/retrieve"))
    with pytest.raises(RetrieverError) as caught:
        RemoteRetriever(httpserver.url_for("/retrieve")).search(["q"], 3)
    assert "hunter2" not in str(caught.value)


def test_a_remote_url_the_policy_refuses_gets_no_request(httpserver: HTTPServer):
    httpserver.expect_request("/retrieve").respond_with_json({"result": [[]]})
    for policy in (NetPolicy(), NetPolicy(allowed_hosts=("localhost",))):  # not listed; listed but loopback
        with pytest.raises(UrlRefused):
            build_retriever("remote", None, url=httpserver.url_for("/retrieve"), policy=policy)
    assert httpserver.log == []
    allowed = NetPolicy(private_hosts=(f"localhost:{httpserver.port}",))
    assert build_retriever("remote", None, url=httpserver.url_for("/"), policy=allowed).search(["q"], 3) == [[]]


def test_remote_with_no_server_listening_raises_a_retriever_error_naming_the_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/retrieve"
    with pytest.raises(RetrieverError, match="cannot reach") as caught:
        RemoteRetriever(url, timeout_s=2).search(["q"], 3)
    assert url in str(caught.value)


def test_retrieve_url_accepts_a_base_url_or_the_endpoint_and_refuses_other_things():
    assert retrieve_url("http://localhost:8000/") == "http://localhost:8000/retrieve"
    assert retrieve_url("http://localhost:8000/retrieve") == "http://localhost:8000/retrieve"
    with pytest.raises(ValueError, match="http://host:port/retrieve"):
        retrieve_url("localhost:8000")


# -- by name --------------------------------------------------------------------------------------------------


def test_build_retriever_by_kind(tmp_path: Path):
    assert isinstance(build_retriever("bm25", TINY, cache_dir=tmp_path), BM25Retriever)
    assert isinstance(build_retriever("remote", None, url="http://127.0.0.1:9/retrieve"), RemoteRetriever)
    with pytest.raises(ValueError, match="needs the URL"):
        build_retriever("remote", TINY)
    with pytest.raises(ValueError, match="needs a passage corpus"):
        build_retriever("dense", None)
    with pytest.raises(ValueError, match="choose one of dense, bm25, remote"):
        build_retriever("splade", TINY)
