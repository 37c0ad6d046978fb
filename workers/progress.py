"""The worker log's line per step: a sink that writes one INFO line for each completed step of a run (its step,
mean reward, mean tool calls and the seconds since the previous step), so `make run`'s output shows a run moving.
It knows nothing of the database."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from uuid import UUID

from inspo_engine import events as ev

log = logging.getLogger(__name__)


class StepLog:
    """An EventSink: one INFO line per StepCompleted, nothing for other events."""

    def __init__(self, run_id: UUID | str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_id = run_id
        self.clock = clock
        self.since = clock()

    def emit(self, event: ev.Event) -> None:
        if not isinstance(event, ev.StepCompleted):
            return
        now = self.clock()
        log.info(
            "run %s step %d/%d (%s): reward %.3f ± %.3f, tool calls %.2f, %.1f s",
            self.run_id,
            event.step,
            event.total_steps,
            event.phase,
            event.reward_mean,
            event.reward_std,
            event.tool_calls_mean,
            now - self.since,
        )
        self.since = now
