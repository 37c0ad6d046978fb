"""Reachability checks: can a corpus answer a questions split, before a run (see `inspo_engine.env.reach`)? A check
is computed once per questions version × corpus version × method × k by a job on the cpu queue, after the corpus's
index job when the index is not built yet (as a run waits); then it is read by the Data page, the New run form and
the run page. A check is seen only by those who see both its datasets. The job's work is `workers.reach`; this
module is its state and the broker's side."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import AnyUser, require_role
from webapp.core.errors import Conflict, InvalidInput

from .indexing import METHODS, index_job_for, index_queue
from .models import DatasetVersion, IndexJob, ReachCheck
from .references import data_snapshot, is_reference
from .selectors import dataset_list

log = logging.getLogger(__name__)

REACH_TASK = "workers.tasks.check_reach"
LOW_SHARE = 0.3
"""Below this share of questions reached in the top k, the New run form and the run page warn."""
MAX_K = 100


@dataclass(frozen=True)
class ReachTarget:
    """What a check is of: the split's file, the corpus's file, the method and k (each reference as it was named)."""

    questions: DatasetVersion
    corpus: DatasetVersion
    method: str
    k: int
    questions_reference: str
    corpus_reference: str


def reach_target(*, team: Team | None, questions: str, split: str, corpus: str, method: str, k: int) -> ReachTarget:
    """The versions `questions` (its `split`) and `corpus` name for `team` (None: shared data only); InvalidInput
    naming the field otherwise."""
    errors: dict[str, list[str]] = {}
    if method not in METHODS:
        errors["method"] = [f"one of {', '.join(METHODS)}"]
    if not 1 <= k <= MAX_K:
        errors["k"] = [f"from 1 to {MAX_K}"]
    for field, value in (("questions", questions), ("corpus", corpus)):
        if not is_reference(value):
            errors[field] = [f"{value[:80]!r}: name uploaded data as data:<name> or data:<name>@<version>"]
    if errors:
        raise InvalidInput(errors)
    owner: Any = team  # data_snapshot reads None as "shared data only"
    asked = data_snapshot(questions, team=owner, field="questions", kind="questions", split=split)
    passages = data_snapshot(corpus, team=owner, field="corpus", kind="corpus")
    return ReachTarget(
        asked.files[split], passages.files["corpus"], method, k, f"{asked.reference}:{split}", passages.reference
    )


def reach_check_find(target: ReachTarget) -> ReachCheck | None:
    return ReachCheck.objects.filter(
        questions=target.questions, corpus=target.corpus, method=target.method, k=target.k
    ).first()


def reach_check_start(*, target: ReachTarget, user: User) -> tuple[ReachCheck, bool]:
    """The target's check: the one computed or under way, else a new one (a failed or cancelled one starts again),
    which waits for the corpus's index job when the index is not built yet. Members of the data's team; shared data
    anyone who sees it. True when work was started."""
    for version in (target.questions, target.corpus):
        if version.dataset.team is not None:
            require_role(user, version.dataset.team, Role.MEMBER)
    check = reach_check_find(target)
    if check is not None and check.status == ReachCheck.Status.WAITING and _lost_its_job(check):
        ReachCheck.objects.filter(pk=check.pk, status=ReachCheck.Status.WAITING).update(status=ReachCheck.Status.FAILED)
        check.refresh_from_db()
    if check is not None and check.status == ReachCheck.Status.QUEUED:  # its message may be lost: send it again
        queued = check.pk  # (a second claim finds it taken)
        transaction.on_commit(lambda: reach_check_send(queued))
    if check is not None and check.status not in (ReachCheck.Status.FAILED, ReachCheck.Status.CANCELLED):
        return check, False
    if check is None:
        try:
            with transaction.atomic():
                check = ReachCheck.objects.create(
                    questions=target.questions, corpus=target.corpus, method=target.method, k=target.k
                )
        except IntegrityError:  # another request created it first
            found = reach_check_find(target)
            assert found is not None
            return found, False
    else:
        restarted = ReachCheck.objects.filter(
            pk=check.pk, status__in=(ReachCheck.Status.FAILED, ReachCheck.Status.CANCELLED)
        )
        if not restarted.update(status=ReachCheck.Status.QUEUED, error="", done=0, total=0, stage=""):
            check.refresh_from_db()
            return check, False
    _wait_or_send(check)
    check.refresh_from_db()
    return check, True


def _lost_its_job(check: ReachCheck) -> bool:
    """Whether a waiting check waits for nothing any more (its index job was deleted, or ended unseen)."""
    return check.index_job is None or check.index_job.status in IndexJob.ENDED


def _wait_or_send(check: ReachCheck) -> None:
    """Send the check's task, or make it wait for the corpus's index job (as a run does): none has built the index
    yet and one is under way (or started now). A job that failed or was cancelled lets the check build it itself."""
    last = IndexJob.objects.filter(version=check.corpus, method=check.method).order_by("-created_at").first()
    if last is None or last.status not in IndexJob.ENDED:
        job, _ = index_job_for(check.corpus, check.method)
        if job.status not in IndexJob.ENDED:
            ReachCheck.objects.filter(pk=check.pk).update(status=ReachCheck.Status.WAITING, index_job=job)
            job.refresh_from_db()
            if job.status not in IndexJob.ENDED:
                return
            ReachCheck.objects.filter(pk=check.pk).update(status=ReachCheck.Status.QUEUED)  # it ended meanwhile
    transaction.on_commit(lambda: reach_check_send(check.pk))


def reach_check_send(check_id: int) -> None:
    from webapp.runs import tasks  # the one place that talks to the broker

    try:
        tasks.send(REACH_TASK, [check_id], index_queue("bm25"))
    except Exception:
        log.exception("could not send reachability check %s; starting it again sends it", check_id)


def reach_check_release(build: int) -> int:
    """Send the checks waiting for the ended jobs of the index build `build`; returns how many."""
    waiting = ReachCheck.objects.filter(
        status=ReachCheck.Status.WAITING, index_job__build=build, index_job__status__in=IndexJob.ENDED
    )
    ids = list(waiting.values_list("pk", flat=True))
    sent = 0
    for check_id in ids:
        if ReachCheck.objects.filter(pk=check_id, status=ReachCheck.Status.WAITING).update(
            status=ReachCheck.Status.QUEUED
        ):
            reach_check_send(check_id)
            sent += 1
    return sent


def reach_check_cancel(*, check: ReachCheck, user: User) -> ReachCheck:
    """Stop a waiting, queued or running check (a running one stops at its next progress report)."""
    for version in (check.questions, check.corpus):
        if version.dataset.team is not None:
            require_role(user, version.dataset.team, Role.MEMBER)
    stopped = ReachCheck.objects.filter(pk=check.pk, status__in=ReachCheck.ACTIVE)
    if not stopped.update(status=ReachCheck.Status.CANCELLED, finished_at=timezone.now()):
        check.refresh_from_db()
        raise Conflict(f"the check is {check.status}; only a waiting, queued or running one can be cancelled")
    check.refresh_from_db()
    return check


# -- the worker's side -------------------------------------------------------------------------------------------


def reach_check_claim(*, check_id: int) -> ReachCheck | None:
    """Queued → running, once; None when a cancel or another worker got to it first."""
    claimed = ReachCheck.objects.filter(pk=check_id, status=ReachCheck.Status.QUEUED)
    if not claimed.update(status=ReachCheck.Status.RUNNING, started_at=timezone.now(), done=0, total=0):
        return None
    return ReachCheck.objects.select_related("questions__dataset", "corpus__dataset").get(pk=check_id)


def reach_check_progress(*, check_id: int, stage: str, done: int, total: int) -> bool:
    """How far the check is; False once it is no longer running (cancelled): the worker stops."""
    running = ReachCheck.objects.filter(pk=check_id, status=ReachCheck.Status.RUNNING)
    return bool(running.update(stage=stage, done=done, total=total))


def reach_check_end(*, check_id: int, result: dict[str, Any] | None = None, error: str | None = None) -> None:
    """The running check is done with `result` (question_count, reachable_topk, reachable_anywhere, examples), or
    failed with `error`; a cancelled one stays cancelled."""
    running = ReachCheck.objects.filter(pk=check_id, status=ReachCheck.Status.RUNNING)
    if error is not None:
        running.update(status=ReachCheck.Status.FAILED, error=error[:2000], finished_at=timezone.now())
        return
    assert result is not None
    running.update(status=ReachCheck.Status.DONE, finished_at=timezone.now(), **result)


# -- reads -------------------------------------------------------------------------------------------------------


def reach_check_list(*, user: AnyUser) -> QuerySet[ReachCheck]:
    """The checks whose questions and corpus the user both sees (their teams' data and shared data)."""
    visible = dataset_list(user=user)
    checks = ReachCheck.objects.filter(questions__dataset__in=visible, corpus__dataset__in=visible)
    return checks.select_related("questions__dataset", "corpus__dataset")


def reach_check_get(*, user: AnyUser, check_id: int) -> ReachCheck:
    check = reach_check_list(user=user).filter(pk=check_id).first()
    if check is None:
        raise Http404("no such reachability check")
    return check


def reach_checks_of(*, user: AnyUser, dataset_id: int) -> QuerySet[ReachCheck]:
    """The checks of a questions dataset the user may see, newest first."""
    return reach_check_list(user=user).filter(questions__dataset_id=dataset_id)
