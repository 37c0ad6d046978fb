"""Runs a `backend: verl` run on a GPU worker: the verl job as a subprocess, its events.jsonl tailed into the
database sink, a cancel turned into the job's stop file (then SIGTERM, then SIGKILL to its process group), and a
job that dies reported with the end of its log. It knows processes and files; the engine runs in the subprocess.

The command is the launcher's (`python -m inspo_engine.verl_job <overrides>`) unless INSPO_VERL_COMMAND
names another program, which then gets the same overrides (tests use a fake job that writes real engine events).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from inspo_engine import events as ev
from inspo_engine.backends.verl.launcher import Job, job_environment, prepare
from inspo_engine.backends.verl.overrides import Cluster
from inspo_engine.config import RunConfig
from inspo_engine.netpolicy import NetPolicy

log = logging.getLogger(__name__)

LOG_FILE = "verl.log"
LOG_TAIL_CHARS = 4000


class VerlJobFailed(RuntimeError):
    """The verl job exited without finishing the run; the message ends with its log."""


@dataclass
class Outcome:
    """How the job ended, as `_settle` reads it."""

    status: str
    step: int


class EventTail:
    """Complete lines appended to an events.jsonl since `offset`; a torn last line waits for its end."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    def read(self) -> list[ev.Event]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [ev.event_from_dict(json.loads(line)) for line in lines if line.strip()]


def job_command(job: Job) -> list[str]:
    """The launcher's command, or INSPO_VERL_COMMAND followed by the same overrides."""
    override = settings.INSPO_VERL_COMMAND
    if not override:
        return job.argv
    return [*shlex.split(override), *job.argv[3:]]  # the overrides follow `python -m <module>`


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - chars))
        return handle.read().decode("utf-8", errors="replace")


def terminate(process: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM to the job's process group, SIGKILL after `grace_s`; returns the exit status."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            log.warning("verl job %s ignored %s for %.0f s", process.pid, sig.name, wait)
    return process.wait()


def verl_execute(
    config: RunConfig,
    out_dir: Path,
    *,
    sink: ev.EventSink,
    should_stop: Callable[[], bool],
    resume_step: int | None = None,
    poll_s: float | None = None,
    grace_s: float | None = None,
    api_key: str | None = None,
    optimizer_policy: NetPolicy | None = None,
    retriever_policy: NetPolicy | None = None,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    on_poll: Callable[[], None] = lambda: None,
    tracker_secrets: dict[str, str] | None = None,
) -> Outcome:
    """Run the job to its end, forwarding its events to `sink`. A stop request writes the stop file: the job
    checkpoints after its current step and finishes as cancelled; one that has not exited `grace_s` later is
    terminated. Raises VerlJobFailed when it ends without a RunFinished event. A `should_stop` that raises (this
    attempt lost the run) terminates the job without asking it for a checkpoint. `on_start` gets the process.

    The job starts with a minimal environment (`job_environment`): the optimizer's `api_key` if it needs one,
    the GPU and Ray variables, INSPO_VERL_ENV_PASSTHROUGH; nothing else of the worker's (no database URL, no
    Django secret, no other key). Its optimizer client checks every request against `optimizer_policy` (the
    policy for a base URL the run chose; None: the operator's endpoint), its agent loops' retriever client against
    `retriever_policy`. `on_poll` runs before the job starts and at every poll (the worker relays the run's control
    requests to the job's control file). `tracker_secrets` (WANDB_API_KEY, MLFLOW_TRACKING_TOKEN: the team's own,
    named by the run) reach the job for verl's own tracker adapters."""
    poll = float(settings.INSPO_VERL_POLL_S if poll_s is None else poll_s)
    grace = float(settings.INSPO_VERL_GRACE_S if grace_s is None else grace_s)
    cluster = Cluster(n_gpus_per_node=settings.INSPO_VERL_GPUS_PER_NODE, nnodes=settings.INSPO_VERL_NNODES)
    job = prepare(
        config,
        out_dir,
        cluster=cluster,
        resume_step=resume_step,
        optimizer_policy=optimizer_policy,
        retriever_policy=retriever_policy,
    )
    tail = EventTail(job.events, job.events.stat().st_size if job.events.exists() else 0)
    env = job_environment(api_key=api_key, extra=tuple(settings.INSPO_VERL_ENV_PASSTHROUGH))
    env |= tracker_secrets or {}
    on_poll()
    with (out_dir / LOG_FILE).open("ab") as output:
        process = subprocess.Popen(
            job_command(job), stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.info("verl job %s started for %s: %s", process.pid, out_dir, " ".join(job_command(job)))
        if on_start is not None:
            on_start(process)
        finished, killed = _follow(process, tail, job, sink, should_stop, poll, grace, on_poll)
    if finished is not None:
        return Outcome(finished.status, finished.step)
    if killed:
        return Outcome("cancelled", _last_step(job.events))
    raise VerlJobFailed(
        f"the verl job exited with status {process.returncode}; its log ends:\n{log_tail(out_dir / LOG_FILE)}"
    )


def _follow(
    process: subprocess.Popen[bytes],
    tail: EventTail,
    job: Job,
    sink: ev.EventSink,
    should_stop: Callable[[], bool],
    poll: float,
    grace: float,
    on_poll: Callable[[], None],
) -> tuple[ev.RunFinished | None, bool]:
    """Forward events until the job exits; returns its RunFinished (if any) and whether it had to be killed."""
    finished: ev.RunFinished | None = None
    stop_requested: float | None = None
    killed = False
    try:
        while True:
            exited = process.poll() is not None
            for event in tail.read():
                sink.emit(event)
                finished = event if isinstance(event, ev.RunFinished) else finished
            if exited:
                return finished, killed
            on_poll()
            if stop_requested is None and should_stop():
                job.stop_file.touch()
                stop_requested = time.monotonic()
            elif stop_requested is not None and time.monotonic() - stop_requested > grace:
                terminate(process, grace_s=30.0)
                killed = True
            time.sleep(poll)
    except BaseException:
        if process.poll() is None:
            terminate(process, grace_s=30.0)
        raise


def _last_step(path: Path) -> int:
    steps = [e.step for e in ev.read_events(path) if isinstance(e, ev.StepCompleted)] if path.exists() else []
    return max(steps, default=0)
