"""Builds a corpus's retrieval index as a job: claims it, fetches the corpus version into the cache, builds the
index the engine's retriever would build (the same cache folder, so every run on that corpus loads it), reports
progress (passages done, the rate) and stops at the next report once cancelled; then sends the tasks of the runs
that waited for it."""

from __future__ import annotations

import functools
import json
import logging
import time
from pathlib import Path

import numpy as np
from django.conf import settings

from inspo_engine.env.indexes import Progress, build_index, count_lines, index_name
from inspo_engine.env.retrievers import DEFAULT_MODEL_NAME, embed_texts
from inspo_engine.env.store import corpus_digest, scan_corpus
from webapp.data.indexing import index_job_claim, index_job_end, index_job_progress, index_job_release
from webapp.data.models import IndexJob
from webapp.data.references import version_file
from webapp.data.retrieval import milvus_settings

log = logging.getLogger(__name__)


class IndexCancelled(Exception):
    """The job was cancelled while it built."""


def index_execute(*, job_id: int) -> str:
    """Build the job's index once ('skipped' when another worker or a cancel got to it first)."""
    job = index_job_claim(job_id=job_id)
    if job is None:
        return "skipped"
    try:
        _build(job)
    except IndexCancelled:
        log.info("index job %s cancelled", job_id)
        status = "cancelled"
    except Exception as error:
        log.exception("index job %s failed", job_id)
        index_job_end(job_id=job_id, error=f"{type(error).__name__}: {error}")
        status = "failed"
    else:
        index_job_end(job_id=job_id)
        status = "done"
    index_job_release(job_id)
    return status


def _build(job: IndexJob) -> None:
    """Build the index of the job's corpus, reporting progress to every job that shares its build."""
    cache = Path(settings.INSPO_CACHE_DIR)
    build = job.build or job.pk
    corpus = version_file(job.version, cache)
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-6)
        if not index_job_progress(job_id=build, done=done, total=total, rate=rate):
            raise IndexCancelled

    if settings.INSPO_RETRIEVAL_ENGINE == "milvus" and job.method == "bm25":
        rows = _write_milvus(job.method, corpus, None, progress)  # Milvus scores BM25 itself: no local index
    else:
        encode = functools.partial(embed_texts, device=_device()) if job.method == "dense" else None
        folder = build_index(job.method, corpus, cache / "indexes", encode=encode, progress=progress)
        rows = int(json.loads((folder / "meta.json").read_text(encoding="utf-8"))["rows"])
        if settings.INSPO_RETRIEVAL_ENGINE == "milvus":
            rows = _write_milvus(job.method, corpus, folder, progress)
    index_job_progress(job_id=build, done=rows, total=rows)


def _device() -> str | None:
    """CUDA where this worker has a GPU (a dense job on the gpu queue), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else None


def _write_milvus(method: str, corpus: Path, dense_folder: Path | None, progress: Progress) -> int:
    """The corpus (and, for dense, the embeddings just built) into the Milvus collection the retrieval service
    searches under the index's name; resumable, as the writer goes on from the rows already there."""
    from inspo_engine.env.milvus import MilvusIndexWriter, collection_for_index

    name = index_name(method, corpus_digest(corpus))
    model = DEFAULT_MODEL_NAME if method == "dense" else ""
    embeddings = None
    if dense_folder is not None:
        meta = json.loads((dense_folder / "meta.json").read_text(encoding="utf-8"))
        embeddings = np.memmap(dense_folder / "vectors.f16", dtype="<f2", mode="r").reshape(-1, int(meta["dim"]))
    settings_ = milvus_settings()
    passages = ((row, passage) for row, (_, _, passage) in enumerate(scan_corpus(corpus)))
    with MilvusIndexWriter(settings_) as writer:
        report = writer.write(
            collection_for_index(settings_.prefix, name, model=model),
            passages,
            total=count_lines(corpus),
            method=method,  # type: ignore[arg-type]
            embeddings=embeddings,
            progress=progress,
        )
    return report.rows
