"""Builds a corpus's retrieval index as a job: claims it, fetches the corpus version into the cache, builds the
index the engine's retriever would build (the same cache folder, so every run on that corpus loads it), reports
progress (passages done, the rate) and stops at the next report once cancelled; then sends the tasks of the runs
that waited for it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from inspo_engine.env.datasets import load_corpus
from inspo_engine.env.retrievers import build_retriever
from webapp.data.indexing import index_job_release
from webapp.data.models import IndexJob
from webapp.data.references import version_file

log = logging.getLogger(__name__)


class IndexCancelled(Exception):
    """The job was cancelled while it built."""


def index_execute(*, job_id: int) -> str:
    """Build the job's index once ('skipped' when another worker or a cancel got to it first)."""
    claimed = IndexJob.objects.filter(pk=job_id, status=IndexJob.Status.QUEUED)
    if not claimed.update(status=IndexJob.Status.RUNNING, started_at=timezone.now()):
        return "skipped"
    job = IndexJob.objects.select_related("version__dataset").get(pk=job_id)
    try:
        _build(job)
    except IndexCancelled:
        log.info("index job %s cancelled", job_id)
        status = "cancelled"
    except Exception as error:
        log.exception("index job %s failed", job_id)
        IndexJob.objects.filter(pk=job_id, status=IndexJob.Status.RUNNING).update(
            status=IndexJob.Status.FAILED, error=f"{type(error).__name__}: {error}"[:2000], finished_at=timezone.now()
        )
        status = "failed"
    else:
        IndexJob.objects.filter(pk=job_id, status=IndexJob.Status.RUNNING).update(
            status=IndexJob.Status.DONE, finished_at=timezone.now()
        )
        status = "done"
    index_job_release(job_id)
    return status


def _build(job: IndexJob) -> None:
    cache = Path(settings.INSPO_CACHE_DIR)
    passages = load_corpus(str(version_file(job.version, cache)))
    IndexJob.objects.filter(pk=job.pk).update(passages_total=len(passages))
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-6)
        running = IndexJob.objects.filter(pk=job.pk, status=IndexJob.Status.RUNNING)
        if not running.update(passages_done=done, passages_total=total, rate=rate):
            raise IndexCancelled

    build_retriever(job.method, passages, cache_dir=cache / "retrievers", progress=progress)
    IndexJob.objects.filter(pk=job.pk).update(passages_done=len(passages))
