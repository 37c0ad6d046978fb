"""A corpus's retrieval index on disk — its passage store, and BM25 (tantivy) or dense (faiss) over it — built once per
corpus content and method, resumably, and opened as a retriever; it knows no server, job queue or web app.

One folder per index, `<root>/<method>-<sha256 of the corpus file, 32 hex>/`:

    meta.json      what was built from what (written last: a folder with it is complete)
    offsets.u64    where each passage's line starts and ends in the corpus file
    bm25/          tantivy's index                       (bm25)
    vectors.f16    the passages' unit embeddings          (dense)
    ann.faiss      a flat index up to FLAT_MAX passages, IVF-PQ beyond (dense)

An index is built in `<name>.building/` and renamed when complete; a build that stops (a cancel, a killed worker)
goes on from its last commit the next time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from inspo_engine.env import bm25
from inspo_engine.env.bm25 import BM25Index, BM25Writer, words
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.datasets import BUILTIN, DatasetError, join_contents
from inspo_engine.env.protocol import Passage
from inspo_engine.env.store import OFFSETS, OffsetsWriter, PassageStore, corpus_digest, scan_corpus

if TYPE_CHECKING:
    import faiss

METHODS = ("bm25", "dense")
SCHEMA_VERSION = 1
NAME = re.compile(r"^(bm25|dense)-[0-9a-f]{32}$")
"""An index's folder name; the only form the retrieval service opens (nothing else reaches a path)."""
COMMIT_EVERY = 500_000
"""Passages between two durable commits of a BM25 build (what a resumed build may have to redo)."""
PROGRESS_EVERY = 5_000
"""Passages between two progress reports of a BM25 build."""
ENCODE_CHUNK = 2_048
"""Passages encoded between two writes of the dense vectors file (and two progress reports)."""
AVERAGE_FROM = 200_000
"""Passages whose mean length BM25 normalises by: exact up to this size, a sample's mean beyond."""
FLAT_MAX = 20_000
"""Up to this many passages a dense index is exact (flat inner product: 8 ms a query at 20k on one core); beyond,
IVF-PQ with an exact re-ranking."""

Progress = Callable[[int, int], None]
Encode = Callable[[list[str]], npt.NDArray[np.float32]]
"""Texts → unit-length float32 embeddings, one row each."""


class IndexMissing(RuntimeError):
    """An index is missing, incomplete or was built from something else."""


def index_name(method: str, corpus_sha256: str) -> str:
    """The folder name of `method`'s index over the corpus with this sha256.

    >>> index_name("bm25", "ab" * 32)
    'bm25-abababababababababababababababab'
    """
    if method not in METHODS or not re.fullmatch(r"[0-9a-f]{64}", corpus_sha256):
        raise ValueError(f"no index name for method {method!r} and digest {corpus_sha256!r}")
    return f"{method}-{corpus_sha256[:32]}"


def passage_text(passage: Passage) -> str:
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def count_lines(path: Path) -> int:
    """Newline-ended lines (plus a last line without one), read in blocks: a progress total, not a validation."""
    lines, last = 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(8 * 1024 * 1024):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


# -- building --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnnPlan:
    """The dense index for `rows` passages of `dim` dimensions: exact up to FLAT_MAX; beyond, IVF with about 4·√rows
    lists and 4-bit fast-scan PQ codes of dim/4 bytes, of which `probes` lists are searched for `rerank` × k candidates
    re-ranked by their exact inner products (read from the vectors file). At 384 dimensions a passage costs 96 bytes
    in memory: 2 GB for wiki-18's 21M. At 300k synthetic clustered vectors, 64 probes of 2,048 lists: recall@10
    0.934 with 20 × k candidates (p95 4.8 ms), 0.977 with 50 × (9.9 ms), 0.990 with 100 × (27.8 ms); codes of dim/8
    bytes reached 0.893 at 100 ×.

    Recall follows the share of lists probed, not their number: 64 of 4,096 lists (1M vectors) reached 0.950 and
    64 of 8,192 (5M) only 0.864, so beyond 4,096 lists one in 64 is probed (128 at 5M, 256 at wiki-18's 16,384)."""

    rows: int
    dim: int
    rerank: int = 50
    train_rows_per_list: int = 40

    @property
    def probes(self) -> int:
        return max(64, self.lists // 64)

    @property
    def exact(self) -> bool:
        return self.rows <= FLAT_MAX

    @property
    def lists(self) -> int:
        return int(2 ** round(math.log2(max(4 * math.sqrt(self.rows), 64))))

    def factory(self) -> str:
        if self.exact:
            return "Flat"
        if self.dim % 4:
            raise ValueError(
                f"a dense index over {self.rows} passages needs a dimension divisible by 4, not {self.dim}"
            )
        return f"IVF{self.lists},PQ{self.dim // 2}x4fs"


def _locked(root: Path, name: str) -> Any:
    root.mkdir(parents=True, exist_ok=True)
    handle = (root / f"{name}.lock").open("w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def build_index(
    method: str,
    corpus: Path,
    root: Path,
    *,
    encode: Encode | None = None,
    model: str = "",
    progress: Progress | None = None,
    threads: int = 2,
) -> Path:
    """The folder of `method`'s index over `corpus` under `root`, built now when there is none (one builder at a time
    per index; a second waits and finds it built). `progress(done, total)` may raise to stop: what was committed
    stays for the next build to go on from."""
    sha = corpus_digest(corpus)
    name = index_name(method, sha)
    folder = root / name
    if (folder / "meta.json").is_file():
        return folder
    with _locked(root, name):
        if (folder / "meta.json").is_file():
            return folder
        building = root / f"{name}.building"
        building.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        if method == "bm25":
            rows = _build_bm25(corpus, building, progress, threads)
            extra: dict[str, Any] = _average_length(corpus)
        else:
            if encode is None:
                raise ValueError("a dense index needs an encoder")
            rows, extra = _build_dense(corpus, building, encode, progress)
            extra["model"] = model
        meta = {
            "schema_version": SCHEMA_VERSION,
            "method": method,
            "corpus": str(corpus.resolve()),
            "corpus_sha256": sha,
            "rows": rows,
            "build_s": round(time.monotonic() - started, 1),
            **extra,
        }
        (building / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(building, folder)
    return folder


def _resume(corpus: Path, building: Path, rows: int) -> Iterator[tuple[int, int, Passage]]:
    """The corpus's passages after the first `rows` (whose offsets stay; any later ones are cut)."""
    offsets = building / OFFSETS
    offsets.touch()
    skip = OffsetsWriter.truncate(offsets, rows)
    return scan_corpus(corpus, skip_bytes=skip)


def _build_bm25(corpus: Path, building: Path, progress: Progress | None, threads: int) -> int:
    total = count_lines(corpus)
    writer = BM25Writer(building / "bm25", threads=threads)
    row = writer.committed
    offsets = OffsetsWriter(building / OFFSETS)
    passages = _resume(corpus, building, row)
    try:
        if progress is not None:
            progress(row, total)
        for start, end, passage in passages:
            writer.add(row, passage_text(passage))
            offsets.add(start, end)
            row += 1
            if row % COMMIT_EVERY == 0:
                offsets.flush()
                writer.commit()
            if progress is not None and row % PROGRESS_EVERY == 0:
                progress(row, total)
        offsets.close()
        writer.finish()
    except BaseException:
        offsets.close()
        writer.abandon()
        raise
    if row == 0:
        raise ValueError(f"{corpus.name} holds no passages to index")
    if progress is not None:
        progress(row, row)
    return row


def _average_length(corpus: Path) -> dict[str, Any]:
    """The mean passage length in BM25's words, over the first AVERAGE_FROM passages (all of a smaller corpus)."""
    lengths = []
    for _, _, passage in scan_corpus(corpus):
        lengths.append(len(words(passage_text(passage))))
        if len(lengths) == AVERAGE_FROM:
            break
    return {"average_length": sum(lengths) / max(len(lengths), 1), "average_length_of": len(lengths)}


def _build_dense(corpus: Path, building: Path, encode: Encode, progress: Progress | None) -> tuple[int, dict[str, Any]]:
    total = count_lines(corpus)
    vectors_path = building / "vectors.f16"
    offsets_path = building / OFFSETS
    offsets_path.touch()
    dim = int(encode(["dimension probe"]).shape[1])
    width = dim * 2
    done = min(vectors_path.stat().st_size // width if vectors_path.exists() else 0, offsets_path.stat().st_size // 16)
    with vectors_path.open("ab") as handle:
        handle.truncate(done * width)
    passages = _resume(corpus, building, done)
    offsets = OffsetsWriter(offsets_path)
    row = done
    try:
        with vectors_path.open("ab") as vectors:
            if progress is not None:
                progress(row, total)
            for chunk in _chunks(passages, ENCODE_CHUNK):
                embedded = encode([passage_text(p) for _, _, p in chunk]).astype("<f2")
                vectors.write(embedded.tobytes())
                vectors.flush()
                for start, end, _ in chunk:
                    offsets.add(start, end)
                offsets.flush()
                row += len(chunk)
                if progress is not None:
                    progress(row, total)
    finally:
        offsets.close()
    if row == 0:
        raise ValueError(f"{corpus.name} holds no passages to index")
    plan = AnnPlan(rows=row, dim=dim)
    _write_ann(vectors_path, plan, building / "ann.faiss")
    return row, {"dim": dim, "factory": plan.factory()}


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _vectors(path: Path, dim: int) -> npt.NDArray[np.float16]:
    return np.memmap(path, dtype="<f2", mode="r").reshape(-1, dim)


def _write_ann(vectors_path: Path, plan: AnnPlan, out: Path) -> None:
    import faiss

    vectors = _vectors(vectors_path, plan.dim)
    index = faiss.index_factory(plan.dim, plan.factory(), faiss.METRIC_INNER_PRODUCT)
    if not plan.exact:
        sample = min(plan.rows, plan.lists * plan.train_rows_per_list)
        chosen = np.sort(np.random.default_rng(0).choice(plan.rows, size=sample, replace=False))
        index.train(np.ascontiguousarray(vectors[chosen], dtype=np.float32))
    for start in range(0, plan.rows, 200_000):
        index.add(np.ascontiguousarray(vectors[start : start + 200_000], dtype=np.float32))
    temporary = out.with_suffix(".tmp")
    faiss.write_index(index, str(temporary))
    os.replace(temporary, out)


# -- searching -------------------------------------------------------------------------------------------------


class CorpusIndex:
    """A built index opened for search: the top-k passages per query with their scores (BM25, or the inner product
    of unit embeddings). Safe to share between threads, except `encode`, which the caller serialises."""

    def __init__(self, folder: Path, *, encode: Encode | None = None) -> None:
        try:
            self.meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise IndexMissing(f"no complete index in {folder.name}") from error
        if self.meta.get("schema_version") != SCHEMA_VERSION:
            raise IndexMissing(f"{folder.name} was built by another version of the index format; build it again")
        self.folder = folder
        self.method: str = self.meta["method"]
        self.store = PassageStore(Path(self.meta["corpus"]), folder / OFFSETS)
        self.encode = encode
        self._bm25 = BM25Index.open(folder / "bm25") if self.method == "bm25" else None
        self._ann: faiss.Index | None = None
        if self.method == "dense":
            if encode is None:
                raise IndexMissing(f"{folder.name} is a dense index: searching it needs the query encoder")
            self._open_dense()

    def _open_dense(self) -> None:
        import faiss

        self.plan = AnnPlan(rows=int(self.meta["rows"]), dim=int(self.meta["dim"]))
        self._ann = faiss.read_index(str(self.folder / "ann.faiss"))
        if not self.plan.exact:
            faiss.extract_index_ivf(self._ann).nprobe = self.plan.probes
        self._vectors_fd = os.open(self.folder / "vectors.f16", os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.store)

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.folder.rglob("*") if path.is_file())

    def search_with_scores(self, queries: Sequence[str], k: int) -> list[list[tuple[Passage, float]]]:
        if not queries:
            return []
        ranked = self.search_rows(queries, k)
        return [
            list(zip(self.store.passages([r for r, _ in hits]), (s for _, s in hits), strict=True)) for hits in ranked
        ]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[passage for passage, _ in hits] for hits in self.search_with_scores(queries, k)]

    def search_rows(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Per query, up to `k` (row, score) pairs, best first."""
        if self._bm25 is not None:
            return [
                self._rescored(query, hits, k)
                for query, hits in zip(queries, self._bm25.search(queries, max(bm25.CANDIDATES * k, 20)), strict=True)
            ]
        assert self.encode is not None
        return self.search_vectors(self.encode(list(queries)), k)

    def _rescored(self, query: str, hits: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
        rows = [row for row, _ in hits]
        texts = [passage_text(p) for p in self.store.passages(rows)]
        assert self._bm25 is not None
        scores = self._bm25.okapi(query, texts, float(self.meta["average_length"]))
        ranked = sorted(zip(rows, scores, strict=True), key=lambda hit: (-hit[1], hit[0]))
        return [(row, score) for row, score in ranked[:k] if score > 0]

    def search_vectors(self, vectors: npt.NDArray[np.float32], k: int) -> list[list[tuple[int, float]]]:
        """Dense search of query embeddings: IVF-PQ candidates re-ranked by their exact inner products."""
        assert self._ann is not None
        k = min(k, self.plan.rows)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        wanted = k if self.plan.exact else min(k * self.plan.rerank, self.plan.rows)
        scores, rows = self._ann.search(vectors, wanted)
        if self.plan.exact:
            return [
                [(int(r), float(s)) for r, s in zip(rr, ss, strict=True) if r >= 0]
                for rr, ss in zip(rows, scores, strict=True)
            ]
        return [
            self._rerank(vector, [int(r) for r in rr if r >= 0], k) for vector, rr in zip(vectors, rows, strict=True)
        ]

    def _rerank(self, vector: npt.NDArray[np.float32], rows: list[int], k: int) -> list[tuple[int, float]]:
        width = self.plan.dim * 2
        candidates = np.stack(
            [np.frombuffer(os.pread(self._vectors_fd, width, row * width), dtype="<f2") for row in rows]
        ).astype(np.float32)
        exact = candidates @ vector
        order = np.argsort(-exact, kind="stable")[:k]
        return [(rows[i], float(exact[i])) for i in order]


def corpus_file(name_or_path: str, root: Path) -> Path:
    """The JSONL file of a corpus named as `env.corpus` names it: 'builtin' is written once under `root/corpora/`
    (by its content), a path is itself."""
    if name_or_path != BUILTIN:
        path = Path(name_or_path)
        if not path.is_file():
            raise DatasetError(f"unknown corpus {name_or_path!r}: expected 'builtin' or a FlashRAG corpus .jsonl file")
        return path
    lines = "".join(json.dumps({"id": p.id, "contents": join_contents(p)}) + "\n" for p in builtin_dataset().corpus)
    folder = root / "corpora"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"builtin-{hashlib.sha256(lines.encode()).hexdigest()[:16]}.jsonl"
    if not path.is_file():
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(lines, encoding="utf-8")
        os.replace(temporary, path)
    return path
