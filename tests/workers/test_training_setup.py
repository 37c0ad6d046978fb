"""Training's set-up and tear-down, shared by the torch loop and the verl job (`workers.training.training`): the
run's inputs checked, a resumed run rewound to its checkpoint, the sinks and trackers opened; and, however the
backend's body ends, the database sink flushed and the trackers closed."""

from __future__ import annotations

import pytest

from inspo_engine.events import EvalCompleted
from inspo_engine.redact import Redactor
from tests.conftest import scripted_config
from webapp.runs import lifecycle, services
from webapp.runs.recorder import DatabaseSink
from webapp.runs.selectors import run_for_worker
from workers import training as training_module
from workers.liveness import Watchdog
from workers.training import StopCheck, training

pytestmark = pytest.mark.django_db


class Tracker:
    def __init__(self) -> None:
        self.events: list[object] = []
        self.closed = 0

    def emit(self, event: object) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def claimed(alice, alice_team, gemini_url, worker_settings, enqueued):
    """A run claimed by this worker, with what `run_execute` makes before it enters `training`."""
    run = services.run_submit(team=alice_team, user=alice, name="set up", config=scripted_config())
    attempt = lifecycle.run_claim(run_id=run.pk, worker="cpu@tests")
    assert attempt is not None
    stop = StopCheck(attempt, time_limit_s=60)
    watchdog = Watchdog(attempt, heartbeat_s=1, grace_s=1)
    return run_for_worker(run_id=run.pk), attempt, stop, watchdog


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_the_sink_is_flushed_and_the_trackers_closed_however_the_backend_ends(claimed, monkeypatch, ending):
    run, attempt, stop, watchdog = claimed
    tracker, flushed = Tracker(), []
    monkeypatch.setattr(training_module, "_trackers", lambda run, config, warn: [tracker])
    monkeypatch.setattr(DatabaseSink, "flush", lambda self: flushed.append(self))

    def body() -> None:
        with training(run, attempt, stop, watchdog, Redactor([])) as session:
            assert session.run == run and session.stop is stop and session.watchdog is watchdog
            assert session.access.config.seed == run.seed and session.checkpoint is None
            session.sink.emit(
                EvalCompleted(step=1, benchmark="builtin", metric="em", value=0.5, n=2, instruction_id="ins-0000")
            )
            if ending == "raises":
                raise RuntimeError("the backend failed")

    if ending == "raises":
        with pytest.raises(RuntimeError, match="the backend failed"):
            body()
    else:
        body()
    assert len(flushed) == 1 and tracker.closed == 1
    assert [type(event) for event in tracker.events] == [EvalCompleted]


def test_both_backends_run_inside_the_one_set_up(claimed, monkeypatch):
    """`run_execute` enters `training` once and hands the session to the backend's body, whichever it is."""
    run, *_ = claimed
    sessions: list[object] = []
    monkeypatch.setattr(training_module, "_train", lambda session, backend: sessions.append(session) or _Result())
    monkeypatch.setattr(training_module, "_train_verl", lambda session: sessions.append(session) or _Result())
    lifecycle.run_fail(claimed[1], "test: let the next claim take it")
    for backend in ("torch", "verl"):
        run.refresh_from_db()
        run.backend = backend
        run.status = run.Status.QUEUED
        run.save(update_fields=["backend", "status"])
        assert training_module.run_execute(run_id=run.pk, worker="cpu@tests") == "finished"
    assert [type(session).__name__ for session in sessions] == ["Training", "Training"]


class _Result:
    status, step = "finished", 6
