"""Executes a run on this worker: claims it, drives the engine with the database sink, a stop check and a
heartbeat, and leaves it finished, cancelled, or failed with the reason (and resumable from its checkpoint).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from inspo_engine.backends.base import PolicyBackend
from inspo_engine.config import RunConfig
from webapp.runs.configs import config_confine
from webapp.runs.endpoints import RunAccess, run_access
from webapp.runs.models import (
    Candidate,
    Evaluation,
    EvolutionRound,
    Instruction,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)

from .sink import DatabaseSink, checkpoints_refresh

log = logging.getLogger(__name__)

HELD = (Run.Status.RUNNING, Run.Status.CANCELLING)


class StopCheck:
    """The engine's `should_stop`, asked after every step: stop when the run was cancelled or time is up."""

    def __init__(self, run_id: UUID | str, *, time_limit_s: float, clock: Any = time.monotonic) -> None:
        self.run_id = run_id
        self.clock = clock
        self.deadline = clock() + time_limit_s
        self.time_limit_s = time_limit_s
        self.reason: str | None = None

    def __call__(self) -> bool:
        if self.clock() >= self.deadline:
            self.reason = "time limit"
            return True
        status = Run.objects.filter(pk=self.run_id).values_list("status", flat=True).first()
        if status != Run.Status.RUNNING:
            self.reason = "cancelled"
            return True
        return False


@contextmanager
def heartbeat(run_id: UUID | str, interval_s: float) -> Iterator[None]:
    """Stamp the run's heartbeat every `interval_s` from a thread, so a stalled or dead worker is noticed."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(interval_s):
                try:
                    Run.objects.filter(pk=run_id, status__in=HELD).update(heartbeat_at=timezone.now())
                except Exception:
                    log.exception("run %s: heartbeat failed", run_id)
                    connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 5)


def run_prepare(run: Run) -> RunAccess:
    """The stored config checked again before anything connects or loads (settings and files may have changed
    since submission): paths confined to the team's data, URLs on the allow-list, the one optimizer key it may
    send. InvalidInput when the run may not go ahead."""
    config = config_confine(RunConfig.from_dict(run.config), team=run.team)
    return run_access(config=config, team=run.team)


def run_out_dir(run: Run) -> Path:
    return Path(settings.INSPO_RUNS_DIR) / str(run.pk)


def run_execute(*, run_id: UUID | str, worker: str = "", backend: PolicyBackend | None = None) -> str:
    """Train the run if it is still queued; returns the run's final status, or 'skipped' when another worker
    (or a cancel) got to it first. Idempotent: a second delivery of the same run changes nothing."""
    now = timezone.now()
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING,
        started_at=Coalesce(F("started_at"), now),
        heartbeat_at=now,
        worker=worker[:200],
        attempts=F("attempts") + 1,
        error="",
        finished_at=None,
    )
    if not claimed:
        log.info("run %s: not queued any more; nothing to do", run_id)
        return "skipped"
    run = Run.objects.select_related("resume_checkpoint", "team").get(pk=run_id)
    stop = StopCheck(run.pk, time_limit_s=settings.INSPO_RUN_TIME_LIMIT_S)
    train = _train_verl if run.backend == "verl" and backend is None else _train
    try:
        with heartbeat(run.pk, settings.INSPO_HEARTBEAT_S):
            result = train(run, stop, backend)
    except BaseException as error:
        _fail(run, f"{type(error).__name__}: {error}")
        raise
    return _settle(run, result.status, result.step, stop)


def _train(run: Run, stop: StopCheck, backend: PolicyBackend | None) -> Any:
    from inspo_engine.build import build_run

    access = run_prepare(run)
    checkpoint = run.resume_checkpoint
    if checkpoint is not None:
        run_discard_after(run=run, step=checkpoint.step)
    sink = DatabaseSink(run.pk)
    loop = build_run(
        access.config,
        out_dir=run_out_dir(run),
        cache_dir=Path(settings.INSPO_CACHE_DIR),
        sink=sink,
        api_key=access.api_key,
        should_stop=stop,
        backend=backend,
        retriever_policy=access.retriever_policy,
        optimizer_policy=access.optimizer_policy,
    )
    if checkpoint is not None:
        loop.load_checkpoint(Path(checkpoint.path))
    try:
        return loop.run()
    finally:
        sink.flush()


def _train_verl(run: Run, stop: StopCheck, backend: PolicyBackend | None) -> Any:
    """The verl job as a subprocess (see `workers.verl`); its events reach the database through the same sink."""
    from .verl import verl_execute

    access = run_prepare(run)
    checkpoint = run.resume_checkpoint
    if checkpoint is not None:
        run_discard_after(run=run, step=checkpoint.step)
    sink = DatabaseSink(run.pk)
    try:
        return verl_execute(
            access.config,
            run_out_dir(run),
            sink=sink,
            should_stop=stop,
            resume_step=checkpoint.step if checkpoint is not None else None,
            api_key=access.api_key,
        )
    finally:
        sink.flush()


def _settle(run: Run, engine_status: str, step: int, stop: StopCheck) -> str:
    """The run's final status from how the engine stopped."""
    checkpoints_refresh(run_id=run.pk)
    fields: dict[str, Any] = {"finished_at": timezone.now(), "heartbeat_at": timezone.now()}
    if engine_status == "finished":
        fields["status"] = Run.Status.FINISHED
    elif stop.reason == "time limit":
        fields["status"] = Run.Status.FAILED
        fields["error"] = (
            f"time limit of {stop.time_limit_s:.0f} s reached; stopped after step {step} with a checkpoint — "
            "resume to continue"
        )
    else:
        fields["status"] = Run.Status.CANCELLED
    Run.objects.filter(pk=run.pk, status__in=HELD).update(**fields)
    return str(fields["status"])


def _fail(run: Run, reason: str, **still: Any) -> int:
    """Mark the run failed with the reason, if it is still held (and matches `still`); it stays resumable from
    its newest checkpoint. Returns 1 when it was marked."""
    try:
        checkpoints_refresh(run_id=run.pk)
        latest = run.checkpoints.filter(available=True).order_by("-step").values_list("step", flat=True).first()
        hint = f" (resumable from the checkpoint of step {latest})" if latest is not None else ""
        return Run.objects.filter(pk=run.pk, status__in=HELD, **still).update(
            status=Run.Status.FAILED, error=(reason + hint)[:10_000], finished_at=timezone.now()
        )
    except Exception:
        log.exception("run %s: could not record the failure %r", run.pk, reason)
        return 0


def run_discard_after(*, run: Run, step: int) -> None:
    """Before resuming from the checkpoint of `step`: drop what the lost attempt stored after it, and bring
    back instructions retired after it, so the resumed steps write onto the state the checkpoint holds."""
    with transaction.atomic():
        for model in (StepMetric, Trajectory, PopulationSnapshot, EvolutionRound, RunNote):
            model.objects.filter(run=run, step__gt=step).delete()
        Evaluation.objects.filter(run=run, step__gt=step, request__isnull=True).delete()
        Candidate.objects.filter(round__run=run, instruction__birth_step__gt=step).update(instruction=None)
        Instruction.objects.filter(run=run, birth_step__gt=step).delete()
        Instruction.objects.filter(run=run, retired_step__gt=step).update(
            retired_step=None, retired_reason="", retired_weight=None
        )
        last = PopulationSnapshot.objects.filter(run=run).order_by("-step", "-id").values_list("best_id", flat=True)
        Run.objects.filter(pk=run.pk).update(step=step, best_instruction_id=last.first())


def run_fail_lost(*, stale_after_s: float, worker: str | None = None, now: datetime | None = None) -> int:
    """Fail runs whose worker is gone: no heartbeat for `stale_after_s`, or (when `worker` is given) every run
    that worker held before it restarted. Returns how many runs were failed."""
    held = Run.objects.filter(status__in=HELD)
    if worker:
        return sum(_fail(run, f"worker lost: {worker} restarted", worker=worker) for run in held.filter(worker=worker))
    cutoff = (now or timezone.now()) - timedelta(seconds=stale_after_s)
    return sum(
        _fail(run, f"worker lost: no heartbeat since {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC", heartbeat_at__lt=cutoff)
        for run in held.filter(heartbeat_at__lt=cutoff)
    )
