"""Index jobs: a corpus's retrieval index (BM25, or dense with faiss and the shipped encoder) built on a CPU worker,
once per corpus content (sha256) and method, with progress a page can show and a cancel. A run whose corpus has no
index yet waits for the job (its task returns and is sent again when the job ends) instead of building it itself.
Each version has a job of its own, what its team sees; the jobs of the same content share one build (`build`: the
id its task carries), so another team's job, dataset or name never shows. The job's work is `workers.indexing`;
this module is its state and the broker's side."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.accounts.models import Role, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import Conflict, InvalidInput

from .models import Dataset, DatasetVersion, IndexJob, IndexWait
from .references import data_snapshot, is_reference

log = logging.getLogger(__name__)

METHODS = ("bm25", "dense")
INDEX_TASK = "workers.tasks.build_index"
INDEX_QUEUE = "cpu"


def _corpus_version(dataset: Dataset) -> DatasetVersion:
    if dataset.kind != Dataset.Kind.CORPUS:
        raise InvalidInput({"dataset": [f"data:{dataset.name} holds questions; only a corpus has an index"]})
    version = dataset.versions.order_by("-number").first()
    if version is None:
        raise InvalidInput({"dataset": [f"data:{dataset.name} has no file yet"]})
    return version


def index_job_for(version: DatasetVersion, method: str) -> tuple[IndexJob, bool]:
    """The version's job that builds (or built) its index by `method`: its own that is queued, running or done; else
    a new one, which shares the build of any such job of the same content (as far along as it is: done when it is
    built), or starts a build and is sent."""
    with transaction.atomic():
        live = IndexJob.objects.select_for_update().filter(sha256=version.sha256, method=method)
        live = live.exclude(status__in=(IndexJob.Status.FAILED, IndexJob.Status.CANCELLED)).order_by("-created_at")
        own = live.filter(version=version).first()
        if own is not None:
            return own, False
        other = live.first()
        if other is not None:  # the same bytes are being (or were) indexed: share the build, show nothing of it
            shared = ("build", "status", "passages_done", "passages_total", "rate", "started_at", "finished_at")
            values = {name: getattr(other, name) for name in shared}
            return IndexJob.objects.create(version=version, sha256=version.sha256, method=method, **values), True
        job = IndexJob.objects.create(version=version, sha256=version.sha256, method=method)
        IndexJob.objects.filter(pk=job.pk).update(build=job.pk)
        job.build = job.pk
        transaction.on_commit(lambda: index_job_send(job))
    return job, True


def index_job_start(*, dataset: Dataset, user: User, method: str) -> tuple[IndexJob, bool]:
    """Build the dataset's newest corpus version's index (members of its team; shared data: anyone who sees it)."""
    if dataset.team is not None:
        require_role(user, dataset.team, Role.MEMBER)
    if method not in METHODS:
        raise InvalidInput({"method": [f"one of {', '.join(METHODS)}"]})
    return index_job_for(_corpus_version(dataset), method)


def index_queue(method: str) -> str:
    """Dense jobs encode on the gpu queue where the deployment has a GPU worker (INSPO_DENSE_INDEX_QUEUE)."""
    return settings.INSPO_DENSE_INDEX_QUEUE if method == "dense" else INDEX_QUEUE


def index_job_estimate_s(job: IndexJob) -> float | None:
    """Before a dense job on the cpu queue has a rate of its own: how long encoding its passages will take at the
    rate of this deployment's last finished cpu dense job (or INSPO_DENSE_CPU_PASSAGES_PER_S). None otherwise."""
    if job.method != "dense" or index_queue("dense") != "cpu" or job.status in IndexJob.ENDED or job.rate:
        return None
    done = IndexJob.objects.filter(method="dense", status=IndexJob.Status.DONE, rate__gt=0).order_by("-finished_at")
    rate = done.values_list("rate", flat=True).first() or settings.INSPO_DENSE_CPU_PASSAGES_PER_S
    return round((job.passages_total or job.version.records) / rate, 1)


def index_job_send(job: IndexJob) -> None:
    from webapp.runs import tasks  # the one place that talks to the broker

    try:
        tasks.send(INDEX_TASK, [job.pk], index_queue(job.method))
    except Exception:
        log.exception("could not send index job %s; starting it again from the Data page sends it", job.pk)


def index_job_cancel(*, job: IndexJob, user: User) -> IndexJob:
    """Cancel a queued or running job; its waiting runs go on and build the index themselves. Its build stops at its
    next progress report once no job that shares it is queued or running."""
    team = job.version.dataset.team
    if team is not None:
        require_role(user, team, Role.MEMBER)
    changed = IndexJob.objects.filter(pk=job.pk, status__in=(IndexJob.Status.QUEUED, IndexJob.Status.RUNNING))
    if not changed.update(status=IndexJob.Status.CANCELLED, finished_at=timezone.now()):
        job.refresh_from_db()
        raise Conflict(f"the index job is {job.status}; only a queued or running one can be cancelled")
    index_job_release(job.build or job.pk)
    job.refresh_from_db()
    return job


def index_job_claim(*, job_id: int) -> IndexJob | None:
    """Queued → running, once, for every job of the build `job_id` (the id its task carries): one of them with its
    corpus version, or None when another worker or cancels got to them first."""
    claimed = IndexJob.objects.filter(build=job_id, status=IndexJob.Status.QUEUED)
    if not claimed.update(status=IndexJob.Status.RUNNING, started_at=timezone.now()):
        return None
    return IndexJob.objects.select_related("version__dataset").filter(build=job_id).order_by("pk").first()


def index_job_progress(*, job_id: int, done: int, total: int, rate: float | None = None) -> bool:
    """Record how far the build `job_id` is (passages done of `total`, and their rate) on each of its jobs still
    running; False once none is (all cancelled): the worker stops."""
    values: dict[str, Any] = {"passages_done": done, "passages_total": total}
    if rate is not None:
        values["rate"] = rate
    return bool(IndexJob.objects.filter(build=job_id, status=IndexJob.Status.RUNNING).update(**values))


def index_job_end(*, job_id: int, error: str | None = None) -> None:
    """The build `job_id` ends, and each of its jobs still running: done, or failed with `error` (which may name the
    dataset the build read: the other jobs get its kind only). One cancelled meanwhile stays cancelled."""
    running = IndexJob.objects.filter(build=job_id, status=IndexJob.Status.RUNNING)
    if error is None:
        running.update(status=IndexJob.Status.DONE, finished_at=timezone.now())
        return
    failed = {"status": IndexJob.Status.FAILED, "finished_at": timezone.now()}
    running.filter(pk=job_id).update(**failed, error=error[:2000])
    running.exclude(pk=job_id).update(**failed, error=f"the index could not be built ({error.split(':', 1)[0][:100]})")


def index_job_release(job_id: int) -> int:
    """Send again the tasks of the runs waiting for the ended jobs of the build `job_id` (returns how many), and
    send the reachability checks that waited for them."""
    from webapp.runs import tasks  # the runs app's broker side

    from .reach import reach_check_release

    reach_check_release(job_id)
    ended = IndexWait.objects.filter(job__build=job_id, job__status__in=IndexJob.ENDED)
    waits = list(ended.select_related("run"))
    IndexWait.objects.filter(pk__in=[w.pk for w in waits]).delete()
    for wait in waits:
        if wait.run.status == wait.run.Status.QUEUED:
            tasks.deliver(wait.run)
    return len(waits)


def run_index_wait(run: Any) -> IndexJob | None:
    """The index job a queued run must wait for: its corpus is uploaded data, its retriever builds an index, and no
    job has built it yet (one is started when none is under way). None: train now (the index is built, or its job
    failed or was cancelled, and the run builds it itself)."""
    env = run.config.get("env") or {}  # the stored config, read as it is: the worker admits it after its claim
    method, corpus = env.get("retriever"), env.get("corpus")
    if method not in METHODS or not is_reference(corpus):
        return None
    snapshot = data_snapshot(corpus, team=run.team, field="env.corpus", kind="corpus")
    version = snapshot.files["corpus"]
    ended = IndexJob.objects.filter(version=version, method=method).order_by("-created_at").first()
    if ended is not None and ended.status in IndexJob.ENDED:
        return None
    job, _ = index_job_for(version, method)
    IndexWait.objects.get_or_create(job=job, run=run)
    job.refresh_from_db()
    if job.status in IndexJob.ENDED:  # it ended between the two reads
        IndexWait.objects.filter(job=job, run=run).delete()
        return None
    return job


def index_waits(*, run: Any) -> list[IndexJob]:
    """The index jobs a run is waiting for (what its page shows)."""
    return [w.job for w in IndexWait.objects.filter(run=run).select_related("job__version__dataset")]
