"""An experiment starts whole seeds first: its runs are sent to the broker seed 0 of every arm, then seed 1, …, so
the first verdict needs only the first seed's runs (the embedded broker keeps that order:
tests/webapp/test_broker.py)."""

from __future__ import annotations

from tests.webapp.experiments.conftest import spec
from webapp.experiments.models import Experiment
from webapp.runs.lifecycle import run_claim, run_settle
from webapp.runs.models import Run

ARMS = ["static", "inspo", "random-pool"]


def sent_order(enqueued: list) -> list[tuple[str, int]]:
    runs = {str(run.pk): (run.arm, run.seed) for run in Run.objects.all()}
    return [runs[args[0]] for _, args, _ in enqueued]


def test_every_arms_first_seed_is_sent_before_any_second_seed(alice, api, settings, enqueued, committed):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = len(ARMS) * 2  # every run is queued at once
    with committed(execute=True):
        response = api(alice).post("/api/v1/experiments/", {"name": "order", **spec(arms=ARMS, seeds=2)}, format="json")
    assert response.status_code == 201, response.json()
    assert sent_order(enqueued) == [(arm, seed) for seed in (0, 1) for arm in ARMS]


def test_runs_past_the_quota_start_whole_seeds_first_as_slots_free(alice, api, settings, enqueued, committed):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 2
    with committed(execute=True):
        api(alice).post("/api/v1/experiments/", {"name": "order", **spec(arms=ARMS, seeds=2)}, format="json")
    experiment = Experiment.objects.get()
    for _ in range(4):
        queued = Run.objects.filter(experiment=experiment, status=Run.Status.QUEUED).order_by("created_at").first()
        assert queued is not None
        attempt = run_claim(run_id=queued.pk, worker="w")
        with committed(execute=True):
            assert attempt is not None and run_settle(attempt, status=Run.Status.FINISHED)
    assert sent_order(enqueued) == [(arm, seed) for seed in (0, 1) for arm in ARMS]
