"""The worker log's line per step: step, reward, tool calls and seconds at INFO, one per StepCompleted, through the
sinks a training run emits to."""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace

import pytest

from inspo_engine.events import EvalCompleted
from inspo_engine.redact import Redactor
from tests.workers.test_fencing import step_completed
from workers.progress import StepLog
from workers.training import _sinks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_step_is_one_info_line_with_its_reward_tool_calls_and_seconds(caplog):
    clock, run_id = Clock(), uuid.uuid4()
    sink = StepLog(run_id, clock=clock)
    caplog.set_level(logging.INFO, logger="workers.progress")
    for step, seconds in ((1, 12.5), (2, 3.0)):
        clock.now += seconds
        sink.emit(step_completed(step))
    sink.emit(EvalCompleted(step=2, benchmark="nq", metric="em", value=0.5, n=2, instruction_id="ins-0001"))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert lines == [
        f"run {run_id} step 1/6 (train): reward 0.500 ± 0.100, tool calls 1.00, 12.5 s",
        f"run {run_id} step 2/6 (train): reward 0.500 ± 0.100, tool calls 1.00, 3.0 s",
    ]


@pytest.mark.django_db
def test_a_training_run_emits_to_the_step_log_after_the_database():
    run = SimpleNamespace(pk=uuid.uuid4())
    watchdog = SimpleNamespace(emit=lambda event: None)
    _, recorded, fanout = _sinks(run, None, watchdog, Redactor([]))
    assert isinstance(fanout.sinks[-1], StepLog) and fanout.sinks[-1].run_id == run.pk
    assert fanout.sinks[1] is recorded  # the database's events pass the redactor first
