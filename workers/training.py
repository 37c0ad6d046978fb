"""Executes a run on this worker: claims it as a new attempt, drives the engine with the database sink, a stop
check and a watchdog, and leaves it finished, cancelled, or failed with the reason (and resumable from its
checkpoint). An attempt that lost its run (see `webapp.runs.lifecycle`) stops within a step and writes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings

from inspo_engine import events as ev
from inspo_engine.config import RunConfig
from inspo_engine.policy import PolicyBackend
from inspo_engine.redact import RedactingSink, Redactor, redacted_logging
from inspo_engine.tracking import TrackingSink
from webapp.accounts.secrets import team_secret_values
from webapp.data.indexing import run_index_wait
from webapp.runs import lifecycle
from webapp.runs.endpoints import RunAccess, net_policy, run_access, tracking_key, tracking_token
from webapp.runs.lifecycle import Attempt, StopReason, run_discard_after
from webapp.runs.models import Checkpoint, Run
from webapp.runs.recorder import DatabaseSink
from webapp.runs.selectors import run_for_worker, run_queued

from .control import ControlRelay, DatabaseControl
from .inputs import stored_config
from .liveness import Watchdog, shutdown_requested_at
from .progress import StepLog

log = logging.getLogger(__name__)


class StopCheck:
    """The engine's `should_stop`, asked after every step: stop when the run was cancelled, the worker is shutting
    down or time is up; raise RunSuperseded when this attempt no longer holds the run."""

    def __init__(self, attempt: Attempt, *, time_limit_s: float, clock: Any = time.monotonic) -> None:
        self.attempt = attempt
        self.clock = clock
        self.deadline = clock() + time_limit_s
        self.time_limit_s = time_limit_s
        self.reason: StopReason | None = None

    def __call__(self) -> bool:
        status = self.attempt.status()
        if status is None:
            raise ev.RunSuperseded(f"{self.attempt} no longer holds the run; it stops without writing")
        if shutdown_requested_at() is not None:
            self.reason = "shutdown"
        elif self.clock() >= self.deadline:
            self.reason = "time limit"
        elif status != Run.Status.RUNNING:
            self.reason = "cancelled"
        return self.reason is not None


def run_inputs(run: Run) -> tuple[RunAccess, dict[str, str]]:
    """The stored config checked again before anything connects or loads (settings and files may have changed
    since submission): paths confined to the team's data, URLs on the allow-list, the one optimizer key it may
    send; and the map from the local paths of the data the config names (`data:<name>@<n>`, fetched into the cache)
    back to the references: what the run's evaluations are named by. InvalidInput when the run may not go ahead."""
    config, names = stored_config(run)
    return run_access(config=config, team=run.team), names


class BenchmarkNames:
    """An EventSink that names each evaluation by the data reference its benchmark's local path came from."""

    def __init__(self, inner: ev.EventSink, names: dict[str, str]) -> None:
        self.inner, self.names = inner, names

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.EvalCompleted) and event.benchmark in self.names:
            event = dataclasses.replace(event, benchmark=self.names[event.benchmark])
        self.inner.emit(event)


def run_out_dir(run: Run) -> Path:
    return Path(settings.INSPO_RUNS_DIR) / str(run.pk)


def run_execute(*, run_id: UUID | str, worker: str = "", backend: PolicyBackend | None = None) -> str:
    """Train the run if it is still queued; returns the run's final status, 'skipped' when another worker (or a
    cancel) got to it first, or 'superseded' when this attempt lost the run while it trained. Idempotent: a
    second delivery of the same run changes nothing."""
    waiting = run_queued(run_id=run_id)
    job = run_index_wait(waiting) if waiting is not None else None
    if job is not None:
        log.info("run %s: waits for index job %s (%s of data:%s)", run_id, job.pk, job.method, job.version.dataset.name)
        return "waiting"
    attempt = lifecycle.run_claim(run_id=run_id, worker=worker)
    if attempt is None:
        log.info("run %s: not queued any more; nothing to do", run_id)
        return "skipped"
    run = run_for_worker(run_id=run_id)
    stop = StopCheck(attempt, time_limit_s=settings.INSPO_RUN_TIME_LIMIT_S)
    watchdog = Watchdog(attempt, heartbeat_s=settings.INSPO_HEARTBEAT_S, grace_s=settings.INSPO_SHUTDOWN_GRACE_S)
    verl = run.backend == "verl" and backend is None
    redactor = run_redactor(run)
    try:
        with (
            watchdog.watching(),
            redacted_logging(redactor),
            training(run, attempt, stop, watchdog, redactor) as session,
        ):
            result = _train_verl(session) if verl else _train(session, backend)
    except ev.RunSuperseded as superseded:
        log.warning("run %s: %s", run.pk, superseded)
        return "superseded"
    except SystemExit:
        lifecycle.run_fail(attempt, f"the worker process was terminated in {watchdog.stage}")
        raise
    except BaseException as error:
        lifecycle.run_fail(attempt, redactor.text(f"{type(error).__name__}: {error}"))
        raise
    status, why = lifecycle.run_outcome(
        engine_status=result.status,
        step=result.step,
        stopped_by=stop.reason,
        time_limit_s=stop.time_limit_s,
        worker=worker,
    )
    lifecycle.run_settle(attempt, status=status, error=redactor.text(why) if why else why)
    return status


def run_redactor(run: Run) -> Redactor:
    """The values a run's notes, events, errors and log lines must never show: every key its team stored and every
    key of the operator's optimizer endpoints."""
    endpoints = settings.INSPO_OPTIMIZER_ENDPOINTS.values()
    return Redactor([*team_secret_values(team=run.team), *(endpoint["api_key"] for endpoint in endpoints)])


def _sinks(
    run: Run, attempt: Attempt, watchdog: Watchdog, redactor: Redactor
) -> tuple[DatabaseSink, ev.EventSink, ev.EventSink]:
    """The database sink, fenced by the attempt; what writes to it (every event with the secrets masked); and what
    the engine emits to: the watchdog sees progress first, the worker's log gets a line per recorded step last."""
    database = DatabaseSink(run.pk, attempt=attempt)
    recorded = RedactingSink(database, redactor)
    return database, recorded, ev.FanoutSink(watchdog, recorded, StepLog(run.pk))


@dataclasses.dataclass(frozen=True)
class Training:
    """One attempt at training a run, as both backends get it from `training`: the run and its attempt, the stop
    check and the watchdog; the stored config checked again with its key and policies (`run_inputs`); the checkpoint
    it resumes from, the steps recorded after it already discarded; and the sink the engine emits to (the database,
    the watchdog, the step log and the run's trackers, each evaluation named by its data reference)."""

    run: Run
    attempt: Attempt
    stop: StopCheck
    watchdog: Watchdog
    access: RunAccess
    checkpoint: Checkpoint | None
    sink: ev.EventSink
    names: dict[str, str] = dataclasses.field(default_factory=dict)
    """Local path of a benchmark → the data reference it was fetched from (what its evaluations are named by)."""

    @property
    def out_dir(self) -> Path:
        return run_out_dir(self.run)


@contextmanager
def training(run: Run, attempt: Attempt, stop: StopCheck, watchdog: Watchdog, redactor: Redactor) -> Iterator[Training]:
    """The set-up and tear-down every backend shares: the run's inputs checked, a resumed run rewound to its
    checkpoint, the sinks and trackers opened; and, however the backend's body ends, the database sink flushed and
    the trackers closed. Status transitions and errors stay with `run_execute`, around it."""
    access, names = run_inputs(run)
    checkpoint = run.resume_checkpoint
    if checkpoint is not None:
        run_discard_after(run=run, step=checkpoint.step)
    database, recorded, sink = _sinks(run, attempt, watchdog, redactor)
    trackers = _trackers(run, access.config, recorded)
    try:
        named = BenchmarkNames(ev.FanoutSink(sink, *trackers), names)
        yield Training(run, attempt, stop, watchdog, access, checkpoint, named, names)
    finally:
        database.flush()
        for tracker in trackers:
            tracker.close()


def _train(session: Training, backend: PolicyBackend | None) -> Any:
    """The engine's loop in this process, on `backend` (default: the one the config names)."""
    from inspo_engine.build import build_run

    access, checkpoint = session.access, session.checkpoint
    loop = build_run(
        access.config,
        out_dir=session.out_dir,
        cache_dir=Path(settings.INSPO_CACHE_DIR),
        sink=session.sink,
        api_key=access.api_key,
        should_stop=session.stop,
        owns_run=session.attempt.current,
        backend=backend,
        retriever_policy=access.retriever_policy,
        optimizer_policy=access.optimizer_policy,
        control=DatabaseControl(session.run.pk),
        retrieval_service=settings.INSPO_RETRIEVAL_URL or None,
        benchmark_names=session.names,
    )
    if checkpoint is not None:
        loop.load_checkpoint(Path(checkpoint.path))
    return loop.run()


def _trackers(run: Run, config: RunConfig, warn: ev.EventSink) -> list[TrackingSink]:
    """The run's experiment trackers (docs/tracking.md), writing into its run directory; a failing one warns through
    `warn` (a note on the run) and never fails the run. W&B and MLflow get the team's stored key and token when the
    run names them."""
    if not config.tracking.backends:
        return []
    key, token = tracking_key(config, run.team), tracking_token(config, run.team)
    sink = TrackingSink(
        config, run_out_dir(run), run_name=f"run-{run.pk}", warn=warn, wandb_key=key, mlflow_token=token,
        policy=net_policy(),
    )  # fmt: skip
    return [sink]


def _tracker_secrets(run: Run, config: RunConfig) -> dict[str, str]:
    """The W&B key and MLflow token the run names, as verl's own tracker adapters read them in the job."""
    backends, secrets = config.tracking.backends, {}
    if "wandb" in backends:
        secrets["WANDB_API_KEY"] = tracking_key(config, run.team)
    if "mlflow" in backends:
        secrets["MLFLOW_TRACKING_TOKEN"] = tracking_token(config, run.team)
    return {name: value for name, value in secrets.items() if value}


def _train_verl(session: Training) -> Any:
    """The verl job as a subprocess (see `workers.verl`); its events reach the database through the same sink. An
    attempt that lost the run terminates the job without asking it for a checkpoint, and a worker that ends its
    process (see `Watchdog`) terminates the job first."""
    from .verl import terminate, verl_execute

    def started(process: subprocess.Popen[bytes]) -> None:
        session.watchdog.before_exit.append(lambda: terminate(process, grace_s=10.0))

    access, checkpoint = session.access, session.checkpoint
    relay = ControlRelay(DatabaseControl(session.run.pk), session.out_dir)
    return verl_execute(
        access.config,
        session.out_dir,
        sink=session.sink,
        should_stop=session.stop,
        resume_step=checkpoint.step if checkpoint is not None else None,
        api_key=access.api_key,
        optimizer_policy=access.optimizer_policy,
        retriever_policy=access.retriever_policy,
        on_start=started,
        on_poll=relay.sync,
        tracker_secrets=_tracker_secrets(session.run, access.config),
    )
