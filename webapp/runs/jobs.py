"""Queued jobs — work on a run that a worker takes once from a queue (evaluation requests, heatmaps): the claim, how
a job ends, and the sweep's part (jobs whose worker is gone, jobs the broker never received). What sets one kind of
job apart is its `JobKind`; `lifecycle` declares the kinds and what each writes when it finishes. Sending a job's
task is `tasks.enqueue`.

Every status change is a conditional update. A claim is the worker's name on the running row; a job leaves running
once and never comes back to it, so the claim is the job's one attempt: a second claim is refused, and a claim that
lost its job (failed as lost) writes nothing again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Self, TypeVar

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from . import tasks
from .models import QueuedJob

J = TypeVar("J", bound=QueuedJob)
Status = QueuedJob.Status

UNSENT_GRACE_S = 30.0
"""A queued row the broker has not accepted this long after it was queued is sent again by the sweep (the web
process sends it when its transaction commits; this leaves that send time to finish)."""


def _nothing_else(job_id: int, reason: str) -> None:
    """A failure that writes nothing beside the job's own row."""


@dataclass(frozen=True)
class JobKind(Generic[J]):
    """One kind of queued job: its model, and what its failure writes beside the row (in the same transaction,
    given the job's id and the reason)."""

    model: type[J]
    failed: Callable[[int, str], object] = _nothing_else

    def rows(self) -> QuerySet[J]:
        return self.model._default_manager.all()

    def __str__(self) -> str:
        return str(self.model._meta.verbose_name)


@dataclass(frozen=True)
class Claim(Generic[J]):
    """A worker's hold on a job of a kind: the job while it is running under the worker's name."""

    kind: JobKind[J]
    job_id: int
    worker: str

    def held(self) -> QuerySet[J]:
        """The job, while this claim still holds it; empty once it does not."""
        return self.kind.rows().filter(pk=self.job_id, status=Status.RUNNING, worker=self.worker[:200])

    def take(self) -> Self | None:
        """Take the queued job (queued → running) under this claim's worker; None when another delivery got it
        first, or it ended before any did."""
        now = timezone.now()
        taken = (
            self.kind.rows()
            .filter(pk=self.job_id, status=Status.QUEUED)
            .update(status=Status.RUNNING, started_at=now, heartbeat_at=now, worker=self.worker[:200])
        )
        return self if taken else None

    def beat(self, *, stage: str, progress_at: datetime) -> bool:
        """Stamp the heartbeat; False once this claim no longer holds the job."""
        return bool(self.held().update(heartbeat_at=timezone.now()))

    def give_up(self, reason: str) -> bool:
        """Fail the job with the reason, if this claim still holds it."""
        return bool(job_fail(self.kind, job_id=self.job_id, reason=reason, worker=self.worker[:200]))

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id}"


def job_finish(claim: Claim[J], store: Callable[[], object] = lambda: None) -> bool:
    """Mark the claim's job finished and `store` what it produced, in one transaction, if the claim still holds
    it; False (and nothing stored) when it does not."""
    with transaction.atomic():
        if not claim.held().update(status=Status.FINISHED, finished_at=timezone.now()):
            return False
        store()
    return True


def job_fail(kind: JobKind[J], *, job_id: int, reason: str, **still: Any) -> int:
    """Fail a queued or running job with the reason, if it still is one (and matches `still`), with what the kind
    writes beside a failure. Returns 1 when it was failed."""
    with transaction.atomic():
        failed = (
            kind.rows()
            .filter(pk=job_id, status__in=(Status.QUEUED, Status.RUNNING), **still)
            .update(status=Status.FAILED, error=reason[:10_000], finished_at=timezone.now())
        )
        if failed:
            kind.failed(job_id, reason)
    return failed


def job_fail_lost(
    kind: JobKind[J], *, stale_after_s: float, worker: str | None = None, now: datetime | None = None
) -> int:
    """Fail running jobs of the kind whose worker is gone: no heartbeat for `stale_after_s`, or (when `worker` is
    given) every one that worker held before it restarted. Returns how many were failed."""
    running = kind.rows().filter(status=Status.RUNNING)
    if worker:
        return sum(
            job_fail(kind, job_id=pk, reason=f"worker lost: {worker} restarted; request it again", worker=worker)
            for pk in running.filter(worker=worker).values_list("pk", flat=True)
        )
    cutoff = (now or timezone.now()) - timedelta(seconds=stale_after_s)
    return sum(
        job_fail(
            kind,
            job_id=job.pk,
            reason=f"worker lost: no heartbeat since {job.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC; request it again",
            heartbeat_at__lt=cutoff,
        )
        for job in running.filter(heartbeat_at__lt=cutoff)
    )


def job_resend_unsent(kind: JobKind[J], *, grace_s: float = UNSENT_GRACE_S, now: datetime | None = None) -> int:
    """Send again the queued jobs of the kind that the broker never accepted (it was down when they were asked
    for)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=grace_s)
    unsent = kind.rows().filter(status=Status.QUEUED, enqueued_at__isnull=True, created_at__lt=cutoff)
    return sum(tasks.deliver(job) for job in unsent.select_related("run"))
