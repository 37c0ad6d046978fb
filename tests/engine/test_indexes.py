"""The on-disk corpus indexes: the passage store, BM25 (tantivy, re-scored as bm25s scored), dense (flat and IVF-PQ),
built once, resumably, and searched without loading the corpus."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from inspo_engine.env import indexes
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.datasets import DatasetError
from inspo_engine.env.indexes import CorpusIndex, build_index, corpus_file
from inspo_engine.env.retrievers import BM25Retriever
from inspo_engine.env.store import OFFSETS, PassageStore, corpus_digest


def _corpus(path: Path, texts: list[str], *, blank_every: int = 0) -> Path:
    lines = []
    for i, text in enumerate(texts):
        lines.append(json.dumps({"id": f"p{i}", "contents": f'"Title {i}"\n{text}'}))
        if blank_every and i % blank_every == 0:
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_store_reads_each_passage_by_row_and_skips_blank_lines(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", [f"text number {i} é" for i in range(50)], blank_every=7)
    folder = build_index("bm25", corpus, tmp_path / "indexes")
    store = PassageStore(corpus, folder / OFFSETS)
    assert len(store) == 50
    got = store.passages([0, 49, 7, 7])
    assert [p.id for p in got] == ["p0", "p49", "p7", "p7"]
    assert got[1].title == "Title 49" and got[1].text == "text number 49 é"


def test_an_index_is_built_once_per_corpus_content(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", ["alpha beta", "gamma delta"])
    first = build_index("bm25", corpus, tmp_path / "indexes")
    stamp = (first / "meta.json").stat().st_mtime_ns
    again = build_index("bm25", corpus, tmp_path / "indexes")
    assert again == first and (first / "meta.json").stat().st_mtime_ns == stamp
    assert first.name == f"bm25-{hashlib.sha256(corpus.read_bytes()).hexdigest()[:32]}"
    assert corpus_digest(corpus) == hashlib.sha256(corpus.read_bytes()).hexdigest()


def _tied_top3(hits: list[tuple[object, float]], k: int = 3) -> tuple[set[str], set[str]]:
    """The ids certainly in the top k, and those tied with the k-th score (either may fill the last places)."""
    ids = [(p.id, s) for p, s in hits]  # type: ignore[attr-defined]
    kth = ids[k - 1][1]
    return {i for i, s in ids if s > kth + 1e-6}, {i for i, s in ids if abs(s - kth) <= 1e-6}


def test_bm25_on_disk_ranks_the_builtin_questions_as_the_in_memory_bm25s_did(tmp_path: Path) -> None:
    """Nothing learns worse: every built-in test question's top 3 are the ones bm25s gave, up to the order of exactly
    equal scores (which bm25s leaves to numpy's partition), and the scores are bm25s's."""
    data = builtin_dataset()
    root = tmp_path / "indexes"
    new = CorpusIndex(build_index("bm25", corpus_file("builtin", root), root))
    old = BM25Retriever(data.corpus)
    questions = [q.text for q in data.split("test")]
    same = 0
    for a, b in zip(new.search_with_scores(questions, 20), old.search_with_scores(questions, 20), strict=True):
        sure_a, tied_a = _tied_top3(a)
        sure_b, tied_b = _tied_top3(b)
        top_a, top_b = {p.id for p, _ in a[:3]}, {p.id for p, _ in b[:3]}
        same += sure_a == sure_b and top_a <= sure_b | tied_b and top_b <= sure_a | tied_a
        assert a[0][1] == pytest.approx(b[0][1], rel=1e-5)
    assert same / len(questions) >= 0.95, f"{same} of {len(questions)}"


def test_a_bm25_build_stopped_midway_goes_on_from_its_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexes, "COMMIT_EVERY", 40)
    texts = [f"word{i % 13} shared common{i % 5} row{i}" for i in range(200)]
    corpus = _corpus(tmp_path / "c.jsonl", texts)
    seen: list[int] = []

    def stop_at_150(done: int, total: int) -> None:
        seen.append(done)
        if done >= 150:
            raise KeyboardInterrupt

    monkeypatch.setattr(indexes, "PROGRESS_EVERY", 10)
    with pytest.raises(KeyboardInterrupt):
        build_index("bm25", corpus, tmp_path / "a", progress=stop_at_150)
    assert not list((tmp_path / "a").glob("bm25-*[0-9a-f]")), "an interrupted build is not an index"
    resumed: list[int] = []
    folder = build_index("bm25", corpus, tmp_path / "a", progress=lambda done, total: resumed.append(done))
    assert resumed[0] == 120, "the three committed batches of 40 are kept"
    whole = build_index("bm25", corpus, tmp_path / "b")
    queries = ["row7 row8 word7", "row33 row34 row35", "row199", "row0 row150"]
    assert CorpusIndex(folder).search_rows(queries, 5) == CorpusIndex(whole).search_rows(queries, 5)
    assert len(CorpusIndex(folder)) == 200 == json.loads((folder / "meta.json").read_text())["rows"]


def test_a_corpus_that_is_not_flashrag_jsonl_is_refused_naming_the_line(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": 1, "contents": "fine"}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"c\.jsonl:2: 'contents' must be a string"):
        build_index("bm25", corpus, tmp_path / "indexes")


def _clustered(rows: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(32, dim))
    vectors = centres[rng.integers(0, 32, rows)] + 0.35 * rng.normal(size=(rows, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


class _TableEncoder:
    """A deterministic encoder: passage `Title i` → row i of a fixed table; a query `q:<i>` → a noisy copy of row i."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.calls = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        rows = []
        for text in texts:
            if text.startswith("q:"):
                rows.append(self.table[int(text[2:])] * 0.9 + 0.1 * self.table[(int(text[2:]) + 1) % len(self.table)])
            elif text.startswith("Title "):
                rows.append(self.table[int(text.split("\n")[0].split()[1])])
            else:
                rows.append(self.table[0])
        out = np.asarray(rows, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.mark.parametrize("flat_max", [100_000, 100], ids=["flat", "ivf-pq"])
def test_dense_finds_the_exact_neighbours_with_recall_at_10_of_at_least_0_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flat_max: int
) -> None:
    monkeypatch.setattr(indexes, "FLAT_MAX", flat_max)
    table = _clustered(3_000, 64, seed=1)
    encoder = _TableEncoder(table)
    corpus = _corpus(tmp_path / "c.jsonl", ["x"] * len(table))
    index = CorpusIndex(build_index("dense", corpus, tmp_path / "indexes", encode=encoder), encode=encoder)
    assert ("ivf" in index.meta["factory"].lower()) == (flat_max == 100)
    queries = [f"q:{i}" for i in range(0, 3_000, 30)]
    found = index.search_rows(queries, 10)
    exact = np.argsort(-(encoder(queries) @ table.T), axis=1)[:, :10]
    recall = np.mean(
        [len({r for r, _ in got} & set(want.tolist())) / 10 for got, want in zip(found, exact, strict=True)]
    )
    assert recall >= 0.9
    assert [p.id for p in index.search(["q:5"], 1)[0]] == ["p5"]
