"""Retrieval on a Milvus deployment: collection names, the index writer and the retriever; it knows nothing about
where the corpus or the embeddings come from, and reads no environment (the caller builds `MilvusSettings`).

One collection per corpus version and method. A `bm25` collection holds each passage's text with Milvus's BM25
function (Milvus ≥ 2.5) filling a sparse vector field from it; a `dense` collection holds the passage embeddings
under an IVF_FLAT (or, on a Milvus server, HNSW) index with the cosine metric. The same code runs against
milvus-lite, the Milvus core embedded in a Python package, given a local `….db` path as the URI.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from pymilvus import DataType, Function, FunctionType, MilvusClient  # type: ignore[import-untyped]
from pymilvus.exceptions import MilvusException  # type: ignore[import-untyped]

from inspo_engine.env.protocol import Passage
from inspo_engine.env.retrievers import Progress, RetrieverError, Scored

Method = Literal["bm25", "dense"]
METHODS: tuple[Method, ...] = get_args(Method)
DenseIndex = Literal["IVF_FLAT", "HNSW"]
Encode = Callable[[list[str]], npt.NDArray[np.float32]]
"""Query texts → one unit-length embedding row each (the model that embedded the passages)."""

MAX_TOPK = 16_384
"""The most hits Milvus returns for one query."""
ID_BYTES, TITLE_BYTES, CONTENTS_BYTES = 512, 4_096, 65_535
"""The VARCHAR fields' sizes in UTF-8 bytes; a passage longer than these is refused, not cut."""
ANALYZER: dict[str, Any] = {
    "tokenizer": "standard",
    "filter": ["lowercase", {"type": "stop", "stop_words": ["_english_"]}],
}
"""Lower-cased words without English stopwords, unstemmed: the words the embedded BM25 (bm25s) indexes."""
BM25_PARAMS = {"bm25_k1": 1.5, "bm25_b": 0.75}
"""bm25s's defaults, so both engines weigh terms alike."""
_NAME_PART = re.compile(r"[a-z][a-z0-9_]{0,31}")
_COLLECTION = re.compile(r"[a-z][a-z0-9_]{0,254}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class MilvusSettings:
    """Where the Milvus deployment is and how its collections are named and indexed."""

    uri: str
    """`http(s)://host:19530` for a Milvus server; a path ending in `.db` for milvus-lite (tests, one machine)."""
    token: str = field(default="", repr=False)
    """`user:password` or an API key; empty when the server has no authentication. Never shown in a message."""
    db_name: str = ""
    """The Milvus database; empty for the server's default one."""
    prefix: str = "inspo"
    """The start of every collection name: a lower-case letter, then up to 31 of [a-z0-9_]."""
    dense_index: DenseIndex = "IVF_FLAT"
    """IVF_FLAT builds everywhere, milvus-lite included (it builds only FLAT, IVF_FLAT and AUTOINDEX); HNSW needs
    a Milvus server."""
    nlist: int = 1_024
    """IVF_FLAT's clusters; about 4·√N suits N passages (16,384 for wiki-18's 21M)."""
    nprobe: int = 32
    """IVF_FLAT's clusters searched per query: recall against speed."""
    timeout_s: float = 30.0
    """The longest any one Milvus call may take before it fails."""

    def __post_init__(self) -> None:
        if not _NAME_PART.fullmatch(self.prefix):
            raise ValueError(f"Milvus collection prefix {self.prefix!r} must match {_NAME_PART.pattern}")
        if self.dense_index not in get_args(DenseIndex):
            raise ValueError(f"dense_index must be one of {', '.join(get_args(DenseIndex))}")
        if self.nlist < 1 or self.nprobe < 1 or self.timeout_s <= 0:
            raise ValueError("nlist, nprobe and timeout_s must be positive")

    @property
    def where(self) -> str:
        """The URI as messages show it: without any user or password written into it.

        >>> MilvusSettings("https://root:hunter2@milvus.internal:19530", token="t").where
        'https://milvus.internal:19530'
        >>> MilvusSettings("/var/lib/inspo/milvus.db").where
        '/var/lib/inspo/milvus.db'
        """
        parts = urlsplit(self.uri)
        if not parts.scheme or not parts.netloc:
            return self.uri
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def collection_name(prefix: str, corpus_sha256: str, method: Method, *, model: str = "") -> str:
    """The collection that holds one corpus version's index for one method; `model` names the embedding model of
    a dense index. Only a validated prefix and hex digests reach Milvus.

    >>> collection_name("inspo", "ab" * 32, "bm25")
    'inspo_bm25_abababababababababababababababab'
    >>> collection_name("inspo", "ab" * 32, "dense", model="sentence-transformers/all-MiniLM-L6-v2")
    'inspo_dense_abababababababababababababababab_e9e2c881'
    """
    if not _NAME_PART.fullmatch(prefix):
        raise ValueError(f"Milvus collection prefix {prefix!r} must match {_NAME_PART.pattern}")
    if not _SHA256.fullmatch(corpus_sha256):
        raise ValueError("corpus_sha256 must be 64 lower-case hex digits")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    name = f"{prefix}_{method}_{corpus_sha256[:32]}"
    return f"{name}_{hashlib.sha256(model.encode()).hexdigest()[:8]}" if model else name


def _checked(collection: str) -> str:
    if not _COLLECTION.fullmatch(collection):
        raise ValueError(f"Milvus collection name {collection!r} must match {_COLLECTION.pattern}")
    return collection


# -- talking to Milvus -----------------------------------------------------------------------------------------


def _failure(settings: MilvusSettings, doing: str, error: MilvusException) -> RetrieverError:
    """A RetrieverError naming the deployment and what failed, with Milvus's reason and never the token."""
    reason = str(getattr(error, "message", "") or error)
    if settings.token:
        reason = reason.replace(settings.token, "***")
    return RetrieverError(f"Milvus at {settings.where}: {doing} failed: {reason}")


def _connect(settings: MilvusSettings) -> Any:
    try:
        return MilvusClient(
            uri=settings.uri, token=settings.token, db_name=settings.db_name, timeout=settings.timeout_s
        )
    except MilvusException as error:
        raise _failure(settings, "connecting", error) from error


def _count(client: Any, collection: str, settings: MilvusSettings, expr: str = "") -> int:
    """Rows of `collection` that match the filter expression `expr` (all of them when it is empty)."""
    rows = client.query(collection, filter=expr, output_fields=["count(*)"], timeout=settings.timeout_s)
    return int(rows[0]["count(*)"])


def _passage_contents(passage: Passage) -> str:
    """What BM25 reads, as the embedded retrievers read it: the title line, then the text."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def _hit_passage(entity: dict[str, Any]) -> Passage:
    title, contents = str(entity["title"]), str(entity["contents"])
    return Passage(str(entity["pid"]), title, contents[len(title) + 1 :] if title else contents)


# -- the schema ------------------------------------------------------------------------------------------------


def _schema(method: Method, dim: int | None) -> Any:
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("row", DataType.INT64, is_primary=True)
    schema.add_field("pid", DataType.VARCHAR, max_length=ID_BYTES)
    schema.add_field("title", DataType.VARCHAR, max_length=TITLE_BYTES)
    if method == "bm25":
        schema.add_field(
            "contents", DataType.VARCHAR, max_length=CONTENTS_BYTES, enable_analyzer=True, analyzer_params=ANALYZER
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name="contents_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["contents"],
                output_field_names=["sparse"],
            )
        )
    else:
        schema.add_field("contents", DataType.VARCHAR, max_length=CONTENTS_BYTES)
        schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=dim)
    return schema


def _index_params(client: Any, method: Method, settings: MilvusSettings) -> Any:
    params = client.prepare_index_params()
    if method == "bm25":
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=BM25_PARAMS)
    elif settings.dense_index == "HNSW":
        params.add_index("embedding", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 200})
    else:
        params.add_index("embedding", index_type="IVF_FLAT", metric_type="COSINE", params={"nlist": settings.nlist})
    return params


def _vector_field(method: Method) -> str:
    return "sparse" if method == "bm25" else "embedding"


def _search_params(method: Method, settings: MilvusSettings, k: int) -> dict[str, Any]:
    if method == "bm25":
        return {"metric_type": "BM25"}
    if settings.dense_index == "HNSW":
        return {"metric_type": "COSINE", "params": {"ef": max(64, k)}}
    return {"metric_type": "COSINE", "params": {"nprobe": settings.nprobe}}


def _check_fields(described: dict[str, Any], collection: str, method: Method, dim: int | None) -> None:
    """Refuse a collection of the same name built for another method or embedding size."""
    fields = {f["name"]: f for f in described.get("fields", [])}
    vector = fields.get(_vector_field(method))
    found_dim = None if vector is None else (vector.get("params") or {}).get("dim")
    if vector is None or (dim is not None and int(found_dim or 0) != dim):
        raise RetrieverError(
            f"Milvus collection {collection} exists but is not a {method} index"
            + (f" of {dim}-dimensional embeddings" if dim is not None else "")
            + "; drop it to rebuild"
        )


# -- writing an index ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteReport:
    """What one `MilvusIndexWriter.write` did."""

    collection: str
    rows: int
    """Passages the collection holds now: all of them, once a write returns."""
    resumed_from: int
    """The first row this write inserted (0 for a fresh collection; `rows` when it found it complete)."""


class MilvusIndexWriter:
    """Writes one corpus's index into a Milvus collection, in batches, for an index job.

    A write is resumable and idempotent: rows go in in order, one batch per insert, so after an interruption
    the collection holds rows 0..n-1 whole batches at a time, perhaps plus part of one batch. Writing again
    finds n (the longest run of whole batches Milvus counts), deletes any row ≥ n and continues from n; a
    complete collection is left as it is. One writer per collection at a time: the index job is that writer.
    """

    def __init__(self, settings: MilvusSettings, *, batch_size: int = 1_000) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.settings = settings
        self.batch_size = batch_size
        self._client = _connect(settings)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> MilvusIndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(
        self,
        collection: str,
        passages: Iterable[tuple[int, Passage]],
        *,
        total: int,
        method: Method,
        embeddings: npt.NDArray[np.float32] | None = None,
        progress: Progress | None = None,
    ) -> WriteReport:
        """Index `passages`, given as (row, passage) with rows 0, 1, … in order, `total` of them. A dense index
        needs `embeddings`, one unit-length float32 row per passage (a memory-mapped array does). `progress(done,
        total)` is called after each batch; it may raise to cancel, and what was inserted stays for a resume."""
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if total < 1:
            raise ValueError("an index needs at least one passage")
        _checked(collection)
        dim = _embedding_dim(method, embeddings, total)
        try:
            self._ensure(collection, method, dim)
            done = self._rows_done(collection, total)
            if done < total:
                self._client.delete(collection, filter=f"row >= {done}", timeout=self.settings.timeout_s)
        except MilvusException as error:
            raise _failure(self.settings, f"preparing collection {collection}", error) from error
        if progress is not None:
            progress(done, total)
        if done < total:
            self._insert(collection, _from_row(passages, done, total), total, done, embeddings, progress)
        try:
            self._client.flush(collection, timeout=self.settings.timeout_s)
        except MilvusException as error:
            raise _failure(self.settings, f"flushing {collection}", error) from error
        return WriteReport(collection, total, done)

    def _insert(
        self,
        collection: str,
        pairs: Iterator[tuple[int, Passage]],
        total: int,
        done: int,
        embeddings: npt.NDArray[np.float32] | None,
        progress: Progress | None,
    ) -> None:
        for batch in _batches(pairs, self.batch_size):
            rows = [_record(row, passage, embeddings) for row, passage in batch]
            try:
                self._client.insert(collection, rows, timeout=self.settings.timeout_s)
            except MilvusException as error:
                raise _failure(self.settings, f"inserting rows from {batch[0][0]} into {collection}", error) from error
            done += len(rows)
            if progress is not None:
                progress(done, total)
        if done != total:
            raise ValueError(f"{total} passages were promised but {done} came")

    def drop(self, collection: str) -> None:
        """Remove a collection (a corpus version no longer served); nothing happens when there is none."""
        try:
            self._client.drop_collection(collection, timeout=self.settings.timeout_s)
        except MilvusException as error:
            raise _failure(self.settings, f"dropping {collection}", error) from error

    def _ensure(self, collection: str, method: Method, dim: int | None) -> None:
        timeout = self.settings.timeout_s
        if self._client.has_collection(collection, timeout=timeout):
            _check_fields(self._client.describe_collection(collection, timeout=timeout), collection, method, dim)
            self._client.load_collection(collection, timeout=timeout)
            return
        self._client.create_collection(
            collection,
            schema=_schema(method, dim),
            index_params=_index_params(self._client, method, self.settings),
            consistency_level="Strong",
            timeout=timeout,
        )

    def _rows_done(self, collection: str, total: int) -> int:
        """The largest n, a whole number of batches or `total`, such that rows 0..n-1 are all there and only once."""
        count = _count(self._client, collection, self.settings)
        if count == total and _count(self._client, collection, self.settings, f"row < {total}") == total:
            return total
        done = min(count, total) // self.batch_size * self.batch_size
        while done > 0 and _count(self._client, collection, self.settings, f"row < {done}") != done:
            done -= self.batch_size
        return done


def _embedding_dim(method: Method, embeddings: npt.NDArray[np.float32] | None, total: int) -> int | None:
    if method == "bm25":
        if embeddings is not None:
            raise ValueError("a bm25 index takes no embeddings")
        return None
    if embeddings is None or embeddings.ndim != 2 or len(embeddings) != total or embeddings.shape[1] < 2:
        raise ValueError(f"a dense index needs embeddings of shape ({total}, dim)")
    return int(embeddings.shape[1])


def _from_row(passages: Iterable[tuple[int, Passage]], start: int, total: int) -> Iterator[tuple[int, Passage]]:
    """The (row, passage) pairs from row `start` on; rows must come as 0, 1, 2, … and stay below `total`."""
    for expected, (row, passage) in enumerate(passages):
        if row != expected or row >= total:
            raise ValueError(f"passage rows must run 0..{total - 1} in order; got row {row} where {expected} belongs")
        if row >= start:
            yield row, passage


def _batches(pairs: Iterator[tuple[int, Passage]], size: int) -> Iterator[list[tuple[int, Passage]]]:
    while batch := list(islice(pairs, size)):
        yield batch


def _record(row: int, passage: Passage, embeddings: npt.NDArray[np.float32] | None) -> dict[str, Any]:
    record: dict[str, Any] = {"row": row, "pid": passage.id, "title": passage.title}
    record["contents"] = _passage_contents(passage)
    for name, limit in (("pid", ID_BYTES), ("title", TITLE_BYTES), ("contents", CONTENTS_BYTES)):
        if len(record[name].encode()) > limit:
            raise ValueError(f"passage {passage.id!r} (row {row}): its {name} is over {limit} bytes")
    if embeddings is not None:
        record["embedding"] = np.asarray(embeddings[row], dtype=np.float32).tolist()
    return record


# -- searching -------------------------------------------------------------------------------------------------


class MilvusRetriever:
    """Top-k passages from one Milvus collection: BM25 over the query text, or cosine similarity of the query's
    embedding by `encode`. A batch of queries is one Milvus search."""

    def __init__(
        self, settings: MilvusSettings, collection: str, *, method: Method, encode: Encode | None = None
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if (method == "dense") != (encode is not None):
            raise ValueError("a dense Milvus retriever needs `encode`, and only a dense one takes it")
        self.settings = settings
        self.collection = _checked(collection)
        self.method = method
        self.encode = encode
        self._client = _connect(settings)
        try:
            if not self._client.has_collection(collection, timeout=settings.timeout_s):
                raise RetrieverError(
                    f"Milvus at {settings.where} has no collection {collection}: build its index first"
                )
            _check_fields(
                self._client.describe_collection(collection, timeout=settings.timeout_s), collection, method, None
            )
            self._client.load_collection(collection, timeout=settings.timeout_s)
        except MilvusException as error:
            self._client.close()
            raise _failure(settings, f"opening collection {collection}", error) from error
        except RetrieverError:
            self._client.close()
            raise

    def close(self) -> None:
        self._client.close()

    def count(self) -> int:
        """Passages in the collection."""
        try:
            return _count(self._client, self.collection, self.settings)
        except MilvusException as error:
            raise _failure(self.settings, f"counting {self.collection}", error) from error

    def _query_data(self, queries: Sequence[str]) -> list[Any]:
        if self.encode is None:
            return list(queries)
        vectors = np.asarray(self.encode(list(queries)), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(queries):
            raise RetrieverError(f"the query encoder gave an array of shape {vectors.shape} for {len(queries)} queries")
        rows: list[Any] = vectors.tolist()
        return rows

    def search_with_scores(self, queries: Sequence[str], k: int) -> Scored:
        if not queries:
            return []
        if k < 1:
            return [[] for _ in queries]
        limit = min(k, MAX_TOPK)
        try:
            results = self._client.search(
                self.collection,
                data=self._query_data(queries),
                anns_field=_vector_field(self.method),
                limit=limit,
                output_fields=["pid", "title", "contents"],
                search_params=_search_params(self.method, self.settings, limit),
                timeout=self.settings.timeout_s,
            )
        except MilvusException as error:
            raise _failure(self.settings, f"searching {self.collection}", error) from error
        return [[(_hit_passage(hit["entity"]), float(hit["distance"])) for hit in hits] for hits in results]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[passage for passage, _ in hits] for hits in self.search_with_scores(queries, k)]


def collection_for_index(prefix: str, index: str, *, model: str = "") -> str:
    """The collection that holds what the embedded engine would keep in the index folder `index` (`bm25-<32 hex>`),
    so the retrieval service names both alike.

    >>> collection_for_index("inspo", "bm25-" + "ab" * 16)
    'inspo_bm25_abababababababababababababababab'
    """
    method, _, digest = index.partition("-")
    return collection_name(prefix, digest + "0" * 32, method, model=model)  # type: ignore[arg-type]
