"""Keeps a worker's claim honest while it trains or evaluates: a watchdog thread stamps the heartbeat with the
stage the run is in and when it last moved on, notices when the claim was lost, and ends the process when its work
cannot stop in time; and the worker-wide shutdown request that reaches the pool's child processes.

It knows claims only through their `beat` and `give_up`, and the engine only through its events.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from types import FrameType
from typing import Any, Protocol

from django.db import connection
from django.utils import timezone

from inspo_engine import events as ev

log = logging.getLogger(__name__)

EXIT_ABANDONED = 75
"""The exit status of a process that gave up work which could not stop in time."""

# -- the shutdown request ----------------------------------------------------------------------------------------

_SHUTDOWN_AT = multiprocessing.RawValue(ctypes.c_double, 0.0)
"""When a shutdown was requested (wall clock; 0: never). Shared memory made when the worker imports its tasks,
before the pool forks its children: the main process's request reaches the child that runs the task."""


def request_shutdown() -> None:
    """Ask the work in progress to stop after its current step (safe inside a signal handler)."""
    if not _SHUTDOWN_AT.value:
        _SHUTDOWN_AT.value = time.time()


def shutdown_requested_at() -> float | None:
    return _SHUTDOWN_AT.value or None


def shutdown_forget() -> None:
    """For tests: as if no shutdown had been requested."""
    _SHUTDOWN_AT.value = 0.0


_IN_POOL_CHILD = [False]


def mark_pool_child() -> None:
    """Called in each of the pool's child processes as it starts."""
    _IN_POOL_CHILD[0] = True


_BUSY = [False]
"""Whether the pool's child runs a task (between Celery's task_prerun and task_postrun)."""


def note_task(*, running: bool) -> None:
    """Called in a pool's child as each task starts and ends."""
    _BUSY[0] = running


_POOL_SIGTERM: list[Callable[[int, FrameType | None], Any] | int | None] = [None]
"""The SIGTERM handler billiard gives a pool's child (it exits through `finally` blocks), which a busy child keeps."""


def idle_child_sigterm(signum: int, frame: FrameType | None) -> None:
    """A pool child's SIGTERM handler (`quiet_idle_child`). Between tasks the child exits with status 0: a
    SIGTERM to the whole process group (systemd stopping the unit, `kill -- -PGID`) reaches the idle child too, and
    dying of it made the main process log `ERROR … Process 'ForkPoolWorker-2' … exited with 'signal 15 (SIGTERM)'` on
    a clean stop. The main process replaces a child that exits, or is stopping itself. During a task billiard's
    handler takes it, as before (`sigterm_asks_to_stop` takes the first one in a run)."""
    pool_handler = _POOL_SIGTERM[0]
    if _BUSY[0] and callable(pool_handler):
        pool_handler(signum, frame)
        return
    sys.exit(0)  # through `finally` blocks, as billiard's own handler: they release the pool's queue locks


def quiet_idle_child() -> None:
    """Called in each of the pool's child processes as Celery initialises it: once billiard has set the child's
    signal handlers (right after Celery's initialiser returns), SIGTERM goes to `idle_child_sigterm`."""
    import billiard.pool  # type: ignore[import-untyped]

    reset_signals = billiard.pool.reset_signals

    def reset_then_quiet(*args: Any, **kwargs: Any) -> None:
        reset_signals(*args, **kwargs)
        _POOL_SIGTERM[0] = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, idle_child_sigterm)

    billiard.pool.reset_signals = reset_then_quiet


@contextmanager
def sigterm_asks_to_stop() -> Iterator[None]:
    """While a task runs in a pool's child: the first SIGTERM (a process-group kill such as a Ctrl-C'd `make run`,
    systemd stopping the unit) asks for a shutdown, as the main process's warm shutdown does; the pool's own
    handler (which exits at once) takes the next one. Elsewhere (the main process, tests) it changes nothing."""
    if not _IN_POOL_CHILD[0] or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    restore = previous if previous is not None else signal.SIG_DFL

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, restore)
        request_shutdown()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, restore)


# -- the watchdog --------------------------------------------------------------------------------------------------


class Claim(Protocol):
    """A worker's hold on a row (a run's attempt, an evaluation request)."""

    def beat(self, *, stage: str, progress_at: datetime) -> bool:
        """Stamp the heartbeat and where the work stands; False once the claim is lost."""
        ...

    def give_up(self, reason: str) -> bool:
        """Fail the work with the reason, if the claim still holds it."""
        ...


class Watchdog:
    """Beside one claimed piece of work, as a thread: a heartbeat every `heartbeat_s` with the stage and the time
    it last moved on (an engine event sink feeds both), and the end of the process when the work had `grace_s`
    to stop and did not — after a shutdown request (the work is failed with where it was, resumable), or after
    the claim was lost (nothing is written)."""

    def __init__(
        self,
        claim: Claim,
        *,
        heartbeat_s: float,
        grace_s: float,
        stage: str = "setup",
        clock: Callable[[], float] = time.time,
        exit: Callable[[int], None] = os._exit,
    ) -> None:
        self.claim = claim
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        self.stage = stage
        self.progress_at = timezone.now()
        self.lost_at: float | None = None
        self.clock = clock
        self.exit = exit
        self.before_exit: list[Callable[[], object]] = []
        """What must not outlive the process (a job it started), undone before it ends."""

    # -- EventSink: progress ---------------------------------------------------------------------------------

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.StageStarted):
            self._moved_on(f"{event.stage}, step {event.step}")
        elif isinstance(event, ev.EvalProgress):
            self._moved_on(f"evaluate {event.done}/{event.total}, step {event.step}")
        elif isinstance(event, ev.StepCompleted):
            self._moved_on(f"step {event.step} done")

    def _moved_on(self, stage: str) -> None:
        self.stage = stage
        self.progress_at = timezone.now()

    # -- one tick --------------------------------------------------------------------------------------------

    def beat(self) -> None:
        if self.claim.beat(stage=self.stage, progress_at=self.progress_at) or self.lost_at is not None:
            return
        self.lost_at = self.clock()
        log.warning("%s: the claim was lost; the work stops at its next step and writes nothing", self.claim)

    def check(self) -> None:
        """End the process if its work outlived its grace after a shutdown request or the loss of its claim."""
        now, requested = self.clock(), shutdown_requested_at()
        if requested is not None and now - requested > self.grace_s:
            self.claim.give_up(
                f"the worker shut down and the work did not stop within {self.grace_s:.0f} s (it was in {self.stage})"
            )
            self._abandon(f"shutdown requested {now - requested:.0f} s ago")
        elif self.lost_at is not None and now - self.lost_at > self.grace_s:
            self._abandon(f"claim lost {now - self.lost_at:.0f} s ago")

    def _abandon(self, why: str) -> None:
        log.error("%s: %s and the work is still running in %s; ending the process", self.claim, why, self.stage)
        for undo in self.before_exit:
            try:
                undo()
            except Exception:
                log.exception("%s: could not clean up before ending the process", self.claim)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        self.exit(EXIT_ABANDONED)

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Run the watchdog thread while the body runs."""
        done = threading.Event()
        tick = min(1.0, self.heartbeat_s)

        def loop() -> None:
            last_beat = self.clock()
            try:
                while not done.wait(tick):
                    try:
                        if self.clock() - last_beat >= self.heartbeat_s:
                            last_beat = self.clock()
                            self.beat()
                        self.check()
                    except Exception:
                        log.exception("%s: heartbeat failed", self.claim)
                        connection.close()
            finally:
                connection.close()

        thread = threading.Thread(target=loop, name=f"watchdog-{self.claim}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=self.heartbeat_s + 5)
