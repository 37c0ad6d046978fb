"""The worker side of a run's life: a claim (an attempt), the rewind before a resumed attempt trains, how an
attempt ends, what a restarted worker loses, and the sweep that fails lost and stalled runs, fails evaluations whose
worker vanished, and hands the broker what it never received. (The user's side — submit, cancel, resume — is in
`services`; docs/architecture.md draws the whole state machine.) Evaluation requests and heatmaps are queued jobs:
their claim, end and sweep are `jobs`, whose kinds are declared here with what each writes when it ends.

Every status change here is a conditional update. A run changes only while the attempt that makes the change still
holds it: a worker that lost its run (failed as lost, then resumed and claimed by another) changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from inspo_engine.checkpoints import OPTIMIZER_DIR
from webapp.accounts.models import Team

from . import tasks
from .heatmaps import heatmap_best_by_step
from .jobs import UNSENT_GRACE_S, Claim, JobKind, job_fail, job_fail_lost, job_finish, job_resend_unsent
from .models import (
    Candidate,
    Checkpoint,
    ControlRequest,
    DiversityRecord,
    Evaluation,
    EvaluationRequest,
    EvolutionRound,
    Heatmap,
    HeatmapCell,
    Instruction,
    PopulationAlarm,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)

log = logging.getLogger(__name__)

HELD = (Run.Status.RUNNING, Run.Status.CANCELLING)


@dataclass(frozen=True)
class Attempt:
    """One claim of a run by a worker, numbered by the run's `attempts` counter. A newer claim, or the run leaving
    running/cancelling (failed as lost or stalled), ends this attempt: from then on it may write nothing."""

    run_id: UUID | str
    number: int
    worker: str

    def held(self) -> QuerySet[Run]:
        """The run, while this attempt still holds it; empty once it does not."""
        return Run.objects.filter(pk=self.run_id, attempts=self.number, status__in=HELD)

    def current(self) -> bool:
        return self.held().exists()

    def status(self) -> str | None:
        """The run's status (running or cancelling) while this attempt holds it; None once it does not."""
        return self.held().values_list("status", flat=True).first()

    def beat(self, *, stage: str, progress_at: datetime) -> bool:
        """Stamp the heartbeat and where the run stands; False once this attempt no longer holds the run."""
        return bool(self.held().update(heartbeat_at=timezone.now(), stage=stage[:64], progress_at=progress_at))

    def give_up(self, reason: str) -> bool:
        return run_fail(self, reason)

    def __str__(self) -> str:
        return f"run {self.run_id} attempt {self.number}"


def run_claim(*, run_id: UUID | str, worker: str) -> Attempt | None:
    """Take a queued run (queued → running) as the next attempt; None when it is not queued any more (another
    worker or a cancel got to it first)."""
    now = timezone.now()
    with transaction.atomic():
        claimed = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
            status=Run.Status.RUNNING,
            started_at=Coalesce(F("started_at"), now),
            heartbeat_at=now,
            progress_at=now,
            stage="setup",
            worker=worker[:200],
            attempts=F("attempts") + 1,
            error="",
            finished_at=None,
        )
        if not claimed:
            return None
        number = Run.objects.values_list("attempts", flat=True).get(pk=run_id)
    return Attempt(run_id=run_id, number=number, worker=worker)


def run_discard_after(*, run: Run, step: int) -> None:
    """Before a resumed attempt trains from the checkpoint of `step`: drop what the lost attempt stored after it,
    and bring back instructions retired after it, so the resumed steps write onto the state the checkpoint holds.
    Control requests it handled after that step are pending again, keeping the step: the engine replays each
    before the same step."""
    with transaction.atomic():
        for model in (
            StepMetric,
            Trajectory,
            PopulationSnapshot,
            DiversityRecord,
            PopulationAlarm,
            EvolutionRound,
            RunNote,
        ):
            model.objects.filter(run=run, step__gt=step).delete()
        PopulationAlarm.objects.filter(run=run, cleared_step__gt=step).update(cleared_step=None)
        Evaluation.objects.filter(run=run, step__gt=step, request__isnull=True).delete()
        Candidate.objects.filter(round__run=run, instruction__birth_step__gt=step).update(instruction=None)
        Instruction.objects.filter(run=run, birth_step__gt=step).delete()
        Instruction.objects.filter(run=run, retired_step__gt=step).update(
            retired_step=None, retired_reason="", retired_weight=None
        )
        ControlRequest.objects.filter(run=run, applied_at_step__gt=step).update(
            status=ControlRequest.Status.PENDING, outcome="", instruction_key=""
        )
        last = PopulationSnapshot.objects.filter(run=run).order_by("-step", "-id").values_list("best_id", flat=True)
        Run.objects.filter(pk=run.pk).update(step=step, best_instruction_id=last.first())


StopReason = Literal["cancelled", "shutdown", "time limit"]
"""Why a worker asked the engine to stop at a step boundary: the run was cancelled, the worker is shutting down,
or the run's time is up."""


def run_outcome(
    *, engine_status: str, step: int, stopped_by: StopReason | None, time_limit_s: float, worker: str
) -> tuple[str, str]:
    """The status (and error) an attempt ends its run with, from how the engine stopped: finished when it ran to
    the end; failed, resumable from the checkpoint it just saved, when a time limit or a worker shutdown stopped
    it; cancelled when a cancel did."""
    if engine_status == "finished":
        return Run.Status.FINISHED, ""
    if stopped_by == "time limit":
        return Run.Status.FAILED, (
            f"time limit of {time_limit_s:.0f} s reached; stopped after step {step} with a checkpoint — "
            "resume to continue"
        )
    if stopped_by == "shutdown":
        return Run.Status.FAILED, (
            f"the worker {worker} shut down; stopped after step {step} with a checkpoint — resume to continue"
        )
    return Run.Status.CANCELLED, ""


def run_settle(attempt: Attempt, *, status: str, error: str = "") -> bool:
    """End the attempt's run as finished, cancelled or failed (with why, and resumable); False when the attempt
    no longer held it (and then it touches nothing)."""
    if not attempt.current():
        return False
    checkpoints_refresh(run_id=attempt.run_id)
    now = timezone.now()
    with transaction.atomic():
        settled = bool(attempt.held().update(status=status, error=error[:10_000], finished_at=now, heartbeat_at=now))
        if settled and status == Run.Status.FINISHED:
            ControlRequest.objects.filter(run_id=attempt.run_id, status=ControlRequest.Status.PENDING).update(
                status=ControlRequest.Status.REJECTED, outcome="the run finished before a step boundary took it"
            )
    if settled:
        _slot_freed(attempt.run_id)
    return settled


def run_fail(attempt: Attempt, reason: str) -> bool:
    """Fail the attempt's run with the reason (resumable from its newest checkpoint), if the attempt holds it (and
    touch nothing if not)."""
    return attempt.current() and bool(_fail(attempt.run_id, reason, attempts=attempt.number))


def _fail(run_id: UUID | str, reason: str, **still: Any) -> int:
    """Mark the run failed with the reason and the checkpoint it resumes from, if it is still held and matches
    `still`. Returns 1 when it was marked."""
    try:
        checkpoints_refresh(run_id=run_id)
        latest = checkpoint_latest_step(run_id=run_id)
        hint = f" (resumable from the checkpoint of step {latest})" if latest is not None else ""
        failed = Run.objects.filter(pk=run_id, status__in=HELD, **still).update(
            status=Run.Status.FAILED, error=(reason + hint)[:10_000], finished_at=timezone.now()
        )
        if failed:
            _slot_freed(run_id)
        return failed
    except Exception:
        log.exception("run %s: could not record the failure %r", run_id, reason)
        return 0


def checkpoint_latest_step(*, run_id: UUID | str) -> int | None:
    available = Checkpoint.objects.filter(run_id=run_id, available=True).order_by("-step")
    return available.values_list("step", flat=True).first()


def checkpoints_refresh(*, run_id: UUID | str, keep: str | None = None) -> int:
    """Mark checkpoints whose directory is gone (the engine keeps only the newest few) as unavailable, and those
    whose optimizer state the engine dropped (it keeps only the newest one a resume needs) as without it."""
    dropped = [
        pk
        for pk, path in Checkpoint.objects.filter(run_id=run_id, optimizer_available=True).values_list("pk", "path")
        if path != keep and not (Path(path) / OPTIMIZER_DIR).is_dir()
    ]
    Checkpoint.objects.filter(pk__in=dropped).update(optimizer_available=False)
    gone = [
        pk
        for pk, path in Checkpoint.objects.filter(run_id=run_id, available=True).values_list("pk", "path")
        if path != keep and not Path(path).is_dir()
    ]
    return Checkpoint.objects.filter(pk__in=gone).update(available=False)


def worker_restarted(*, worker: str) -> dict[str, int]:
    """A worker that starts again under the same name lost whatever it was running before: fail its runs and
    evaluations. Returns how many of each."""
    lost_after_s = settings.INSPO_LOST_AFTER_S
    return {
        "runs": run_fail_lost(stale_after_s=lost_after_s, worker=worker),
        "evaluations": jobs_fail_lost(stale_after_s=lost_after_s, worker=worker),
    }


# -- pending runs: an experiment's runs beyond the team's quota wait, and start as slots free ----------------------


def runs_start_pending(*, team_id: int) -> int:
    """Queue the team's pending runs, oldest first, while it has fewer than INSPO_TEAM_MAX_ACTIVE_RUNS queued,
    running or cancelling (0: no limit), and enqueue each once committed. The team's row is locked as a submission
    locks it, so two ends racing start no more runs than the quota allows. Returns how many were queued."""
    most = settings.INSPO_TEAM_MAX_ACTIVE_RUNS
    started = 0
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team_id).first()
        pending = Run.objects.filter(team_id=team_id, status=Run.Status.PENDING).order_by("created_at", "id")
        if most:
            free = most - Run.objects.filter(team_id=team_id, status__in=Run.ACTIVE).count()
            pending = pending[: max(free, 0)]
        for run in list(pending):
            now = timezone.now()
            if Run.objects.filter(pk=run.pk, status=Run.Status.PENDING).update(
                status=Run.Status.QUEUED, queued_at=now, enqueued_at=None
            ):
                run.refresh_from_db()
                tasks.enqueue(run)
                started += 1
    return started


def _slot_freed(run_id: UUID | str) -> None:
    """A run of the team stopped being active: start what waits for the slot. A failure here is logged, never
    raised: the run's own end is already recorded, and the sweep starts what this missed."""
    try:
        team_id = Run.objects.values_list("team_id", flat=True).filter(pk=run_id).first()
        if team_id is not None:
            runs_start_pending(team_id=team_id)
    except Exception:
        log.exception("run %s: could not start the team's pending runs", run_id)


def runs_start_all_pending() -> int:
    """For the sweep: every team's pending runs that fit its quota (see `runs_start_pending`)."""
    teams = Run.objects.filter(status=Run.Status.PENDING).order_by().values_list("team_id", flat=True).distinct()
    return sum(runs_start_pending(team_id=team_id) for team_id in list(teams))


# -- the sweep ---------------------------------------------------------------------------------------------------


def run_fail_lost(*, stale_after_s: float, worker: str | None = None, now: datetime | None = None) -> int:
    """Fail runs whose worker is gone: no heartbeat for `stale_after_s`, or (when `worker` is given) every run
    that worker held before it restarted. Returns how many runs were failed."""
    held = Run.objects.filter(status__in=HELD)
    if worker:
        return sum(
            _fail(run.pk, f"worker lost: {worker} restarted", worker=worker, attempts=run.attempts)
            for run in held.filter(worker=worker)
        )
    cutoff = (now or timezone.now()) - timedelta(seconds=stale_after_s)
    return sum(
        _fail(
            run.pk,
            f"worker lost: no heartbeat since {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC",
            heartbeat_at__lt=cutoff,
            attempts=run.attempts,
        )
        for run in held.filter(heartbeat_at__lt=cutoff)
    )


def run_fail_stalled(*, stall_after_s: float, now: datetime | None = None) -> int:
    """Fail runs whose worker is alive but whose step has not moved on (no stage began, no step ended) for
    `stall_after_s`: the error says where it hung. The worker, no longer holding the run, stops by itself."""
    cutoff = (now or timezone.now()) - timedelta(seconds=stall_after_s)
    return sum(
        _fail(
            run.pk,
            f"stalled: no progress for {stall_after_s:.0f} s in {run.stage or 'setup'} "
            f"(since {run.progress_at:%Y-%m-%d %H:%M:%S} UTC)",
            progress_at__lt=cutoff,
            attempts=run.attempts,
        )
        for run in Run.objects.filter(status__in=HELD, progress_at__lt=cutoff)
    )


def run_resend_unsent(*, grace_s: float = UNSENT_GRACE_S, now: datetime | None = None) -> int:
    """Send again the queued runs the broker never accepted (it was down when they were submitted or resumed)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=grace_s)
    unsent = Run.objects.filter(status=Run.Status.QUEUED, enqueued_at__isnull=True, queued_at__lt=cutoff)
    return sum(tasks.deliver(run) for run in unsent)


# -- queued jobs: evaluation requests and heatmaps (see `jobs`) --------------------------------------------------


def _heatmap_failed(heatmap_id: int, reason: str) -> None:
    """A failed heatmap leaves a `heatmap_failed` note on the run's timeline; its scored cells stay."""
    _heatmap_note(heatmap_id, "heatmap_failed", error=reason[:2000])


EVALUATION = JobKind(EvaluationRequest)
HEATMAP = JobKind(Heatmap, failed=_heatmap_failed)
JOBS: tuple[JobKind[Any], ...] = (EVALUATION, HEATMAP)
"""Every kind of queued job, for the sweep and a restarted worker."""


class EvaluationClaim(Claim[EvaluationRequest]):
    """A worker's hold on a running evaluation request."""

    def __init__(self, *, request_id: int, worker: str) -> None:
        super().__init__(EVALUATION, request_id, worker)


class HeatmapClaim(Claim[Heatmap]):
    """A worker's hold on a running heatmap."""

    def __init__(self, *, heatmap_id: int, worker: str) -> None:
        super().__init__(HEATMAP, heatmap_id, worker)


def evaluation_claim(*, request_id: int, worker: str) -> EvaluationClaim | None:
    """Take a queued evaluation request (queued → running); None when another delivery got it first."""
    return EvaluationClaim(request_id=request_id, worker=worker).take()


def heatmap_claim(*, heatmap_id: int, worker: str) -> HeatmapClaim | None:
    """Take a queued heatmap (queued → running); None when another delivery got it first."""
    return HeatmapClaim(heatmap_id=heatmap_id, worker=worker).take()


def evaluation_finish(claim: Claim[EvaluationRequest], results: list[Evaluation]) -> bool:
    """Store the results and mark the request finished, in one transaction, if the claim still holds it."""
    return job_finish(claim, lambda: Evaluation.objects.bulk_create(results))


def evaluation_fail_lost(*, stale_after_s: float, worker: str | None = None, now: datetime | None = None) -> int:
    """Fail running evaluation requests whose worker is gone (no heartbeat, or the worker restarted)."""
    return job_fail_lost(EVALUATION, stale_after_s=stale_after_s, worker=worker, now=now)


def jobs_fail_lost(*, stale_after_s: float, worker: str | None = None, now: datetime | None = None) -> int:
    """Fail running jobs of every kind whose worker is gone (see `jobs.job_fail_lost`)."""
    return sum(job_fail_lost(kind, stale_after_s=stale_after_s, worker=worker, now=now) for kind in JOBS)


def sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Everything the periodic sweep does, with counts: lost runs, stalled runs, lost evaluations (requests and
    heatmaps), queued rows sent again, and pending runs started where their team's quota has room."""
    now = now or timezone.now()
    return {
        "runs_lost": run_fail_lost(stale_after_s=settings.INSPO_LOST_AFTER_S, now=now),
        "runs_stalled": run_fail_stalled(stall_after_s=settings.INSPO_STALL_AFTER_S, now=now),
        "evaluations_lost": jobs_fail_lost(stale_after_s=settings.INSPO_LOST_AFTER_S, now=now),
        "runs_resent": run_resend_unsent(now=now),
        "runs_started": runs_start_all_pending(),
        "evaluations_resent": sum(job_resend_unsent(kind, now=now) for kind in JOBS),
    }


# -- heatmaps: an instruction × checkpoint evaluation, cell by cell -----------------------------------------------


def heatmap_sample(claim: Claim[Heatmap], question_ids: list[str]) -> bool:
    """Record the questions every cell answers, if the claim still holds the heatmap."""
    return bool(claim.held().update(question_ids=question_ids, heartbeat_at=timezone.now()))


def heatmap_cell_store(
    claim: Claim[Heatmap], *, cell_id: int, scores: dict[str, float], trajectories: list[dict[str, Any]]
) -> bool:
    """Store one scored cell, if the claim still holds the heatmap (its row locked while the cell is written)."""
    now = timezone.now()
    with transaction.atomic():
        if not claim.held().update(heartbeat_at=now):
            return False
        HeatmapCell.objects.filter(pk=cell_id, heatmap_id=claim.job_id).update(
            em=scores["em"],
            f1=scores["f1"],
            answered=scores.get("answered"),
            n=len(trajectories),
            trajectories=trajectories,
            finished_at=now,
        )
    return True


def heatmap_finish(claim: Claim[Heatmap]) -> bool:
    """Mark the heatmap finished, with a `heatmap_finished` note naming the best instruction of each checkpoint,
    if the claim still holds it."""

    def note() -> None:
        _heatmap_note(claim.job_id, "heatmap_finished", best=heatmap_best_by_step(heatmap_id=claim.job_id))

    return job_finish(claim, note)


def heatmap_fail(*, heatmap_id: int, reason: str, **still: Any) -> int:
    """Fail a queued or running heatmap with the reason (its scored cells stay), if it still is one (and matches
    `still`), with a `heatmap_failed` note."""
    return job_fail(HEATMAP, job_id=heatmap_id, reason=reason, **still)


def _heatmap_note(heatmap_id: int, kind: str, **payload: Any) -> None:
    heatmap = Heatmap.objects.get(pk=heatmap_id)
    cells = HeatmapCell.objects.filter(heatmap_id=heatmap_id)
    RunNote.objects.create(
        run_id=heatmap.run_id,
        step=max(cells.values_list("checkpoint__step", flat=True), default=0),
        kind=kind,
        payload={"heatmap_id": heatmap_id, "cells_done": cells.filter(finished_at__isnull=False).count(), **payload},
        time=timezone.now(),
    )
