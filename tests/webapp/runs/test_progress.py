"""A run's progress counts its evaluations (#54 item 4): the engine's EvalProgress events reach the run's row through
the recorder, and the run API's `activity` says the phase ("evaluating the untrained policy: 23 / 64 questions",
"training step 4 / 12", "evaluating step 12: 10 / 64 questions"), the share done and the time left from the steps so
far and the questions its remaining evaluations will answer."""

from __future__ import annotations

import pytest
from django.utils import timezone

from inspo_engine import events as ev
from inspo_engine.presets import preset
from tests.factories import RunFactory, StepMetricFactory
from webapp.runs.models import Run
from webapp.runs.recorder import DatabaseSink

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(alice, alice_team):
    """A quick-shaped run (12 steps, the untrained policy evaluated first, and at the end) that has just started."""
    return RunFactory(
        team=alice_team,
        creator=alice,
        preset="quick",
        config=preset("quick").to_dict(),
        status=Run.Status.RUNNING,
        started_at=timezone.now(),
        total_steps=12,
    )


def activity(client, run):
    response = client.get(f"/api/v1/runs/{run.pk}/")
    assert response.status_code == 200
    return response.json()["activity"]


def test_the_first_evaluation_then_the_steps_then_the_last_evaluation_are_the_runs_progress(alice, bob, api, running):
    sink = DatabaseSink(running.pk)
    sink.emit(ev.EvalProgress(step=0, done=0, total=64, benchmark="builtin", time=1000.0))
    sink.emit(ev.EvalProgress(step=0, done=23, total=64, benchmark="builtin", time=1011.5))
    now = activity(api(alice), running)
    assert now["phase"] == "evaluating" and now["text"] == "evaluating the untrained policy: 23 / 64 questions"
    assert now["evaluation"] == {"step": 0, "done": 23, "total": 64}
    assert now["eta_seconds"] is None  # no step timed yet
    assert 0 < now["fraction"] < 1 / 14  # 12 steps and 2 evaluations, the first a third done

    sink.emit(ev.EvalProgress(step=0, done=64, total=64, benchmark="builtin", time=1032.0))  # 0.5 s a question
    for step in (1, 2, 3):
        StepMetricFactory(run=running, step=step, timings={"rollout": 7.0, "update": 3.0})  # 10 s a step
    Run.objects.filter(pk=running.pk).update(step=3)
    now = activity(api(alice), running)
    assert now["phase"] == "training" and now["text"] == "training step 4 / 12"
    # 9 steps × 10 s and the final evaluation's 64 questions × 0.5 s: not the 90 s the steps alone would say.
    assert now["eta_seconds"] == pytest.approx(9 * 10 + 64 * 0.5)
    assert (now["remaining_steps"], now["remaining_questions"]) == (9, 64)
    assert now["fraction"] == pytest.approx((30 + 32) / (30 + 32 + 122))

    Run.objects.filter(pk=running.pk).update(step=12)
    sink.emit(ev.EvalProgress(step=12, done=0, total=64, benchmark="builtin", time=2000.0))
    sink.emit(ev.EvalProgress(step=12, done=10, total=64, benchmark="builtin", time=2005.0))
    now = activity(api(alice), running)
    assert now["text"] == "evaluating step 12: 10 / 64 questions"
    assert now["eta_seconds"] == pytest.approx(54 * (32 + 5) / (64 + 10))
    assert api(bob).get(f"/api/v1/runs/{running.pk}/").status_code == 404


def test_a_waiting_or_ended_run_says_so(alice, api, running):
    Run.objects.filter(pk=running.pk).update(status=Run.Status.QUEUED)
    assert activity(api(alice), running)["text"] == "queued for the cpu workers"
    Run.objects.filter(pk=running.pk).update(status=Run.Status.FINISHED, step=12)
    done = activity(api(alice), running)
    assert done["phase"] == "ended" and done["fraction"] == 1.0 and done["eta_seconds"] is None


def test_the_watchdog_names_the_evaluations_progress_as_the_runs_stage():
    from workers.liveness import Watchdog

    class Claim:
        def beat(self, **_):
            return True

        def give_up(self, reason):
            return True

    watchdog = Watchdog(Claim(), heartbeat_s=60, grace_s=5)
    watchdog.emit(ev.EvalProgress(step=0, done=32, total=64))
    assert watchdog.stage == "evaluate 32/64, step 0"
