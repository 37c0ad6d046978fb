"""What an experiment would cost, from one source: `experiment_estimate`, which the API answers and the New experiment
form renders. It is a range over the team's finished runs of the preset, each scaled to the new runs' steps and
evaluation questions, when there are any, else the preset's stated figure, labelled; with the runs queued and running
ahead of it on the same queue; past the seed or run limit it names the limit (one limit, stated on the form before
anything is typed)."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from inspo_engine.experiments import MAX_SEEDS
from inspo_engine.presets import preset
from tests.factories import EvaluationFactory, RunFactory, StepMetricFactory
from webapp.experiments.models import MAX_EXPERIMENT_RUNS
from webapp.experiments.selectors import MINUTES_PER_RUN, experiment_estimate
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

URL = "/api/v1/experiments/estimate/"


def finished_run(team, preset: str, minutes: float, *, step_seconds: float = 0.0, questions: int = 0, **fields):
    """A finished run of `minutes` worker time, whose steps' timings add up to `step_seconds` each and whose
    evaluations answered `questions` in all."""
    end = timezone.now()
    run = RunFactory(
        team=team,
        preset=preset,
        status=Run.Status.FINISHED,
        started_at=end - timedelta(minutes=minutes),
        finished_at=end,
        **fields,
    )
    if step_seconds:
        for step in range(1, run.total_steps + 1):
            StepMetricFactory(run=run, step=step, timings={"rollout": step_seconds * 2 / 3, "update": step_seconds / 3})
    if questions:
        EvaluationFactory(run=run, step=run.total_steps, n=questions)
    return run


SHAPE = {"overrides": {"grpo.total_steps": 8}, "evaluation": {"benchmarks": ["builtin"], "size": 16}}
"""Runs of 8 steps evaluated once, at the end, on 16 questions."""


def test_without_finished_runs_the_estimate_is_the_presets_figure_labelled_as_such(alice_team):
    minutes = MINUTES_PER_RUN["smoke"]
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=2)
    assert (estimate.runs, estimate.minutes_per_run, estimate.basis) == (4, minutes, "preset")
    assert (estimate.minutes_low, estimate.minutes_high) == (4.3, 5.6)
    assert estimate.text.startswith("4 runs × 4.3–5.6 min ≈ 17–22 min of worker time (the preset's stated figure")
    assert "not your team's: it has no finished run of the preset" in estimate.text
    assert "not scaled" in estimate.method
    cpu = experiment_estimate(team=alice_team, preset="cpu-demo", arms=4, seeds=3).text
    assert cpu.startswith("12 runs × 14–25 min ≈ 2.8–5.0 h of worker time")


def test_the_teams_past_runs_are_scaled_to_the_steps_and_questions_and_give_a_range(alice_team, bob_team):
    # 10 min: 4 steps of 90 s (6 min) and 4 min over 8 questions → 8 × 1.5 + 16 × 0.5 = 20 min for 8 steps, 16 q.
    finished_run(alice_team, "smoke", 10.0, step_seconds=90, questions=8)
    # 5 min: 4 steps of 30 s (2 min) and 3 min over 8 questions → 8 × 0.5 + 16 × 0.375 = 10 min.
    finished_run(alice_team, "smoke", 5.0, step_seconds=30, questions=8)
    finished_run(alice_team, "cpu-demo", 20.0)  # another preset
    finished_run(bob_team, "smoke", 60.0)  # another team
    RunFactory(team=alice_team, preset="smoke", status=Run.Status.FAILED)
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=2, **SHAPE)
    assert estimate.basis == "team" and estimate.measured_runs == 2
    assert (estimate.steps, estimate.questions) == (8, 16)
    assert (estimate.minutes_low, estimate.minutes_per_run, estimate.minutes_high) == pytest.approx((10, 15, 20))
    assert estimate.worker_minutes == pytest.approx([40, 60, 80])
    assert estimate.text.startswith("4 runs × 10–20 min ≈ 40–80 min of worker time (from your team's 2 finished runs")
    assert "scaled to 8 steps and 16 evaluation questions" in estimate.method
    # Half the steps and questions: half the time, from the same runs.
    half = experiment_estimate(
        team=alice_team,
        preset="smoke",
        arms=2,
        seeds=2,
        overrides={"grpo.total_steps": 4},
        evaluation={"benchmarks": ["builtin"], "size": 8},
    )
    assert (half.minutes_low, half.minutes_high) == pytest.approx((5, 10))


def test_the_queue_ahead_counts_every_teams_runs_on_the_same_queue_with_the_time_they_have_left(alice_team, bob_team):
    now = timezone.now()
    running = RunFactory(
        team=bob_team, status=Run.Status.RUNNING, started_at=now - timedelta(minutes=3), step=2, total_steps=4
    )
    for step in (1, 2):
        StepMetricFactory(run=running, step=step, timings={"rollout": 30.0})
    # Its evaluations so far answered 4 questions in 8 s: 2 steps × 30 s + its final 4 questions × 2 s = 68 s left.
    Run.objects.filter(pk=running.pk).update(evaluation_progress={"seconds": 8.0, "questions": 4, "evaluations": 1})
    RunFactory(team=alice_team, preset="cpu-demo", status=Run.Status.QUEUED)  # 25 min: the preset's figure
    RunFactory(team=bob_team, backend="verl", preset="paper", status=Run.Status.QUEUED)  # the gpu queue
    RunFactory(team=bob_team, status=Run.Status.PENDING)  # not on the queue yet
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=2)
    assert (estimate.queue, estimate.queue_runs, estimate.slots) == ("cpu", 2, 1)
    assert estimate.queue_minutes == pytest.approx(68 / 60 + 25)
    assert estimate.finish_minutes == pytest.approx([26.13 + 4 * m for m in (4.3, 5.0, 5.6)], abs=0.01)
    assert "2 runs ahead on the cpu queue (~26 min left); finished in about 43–49 min from now" in estimate.text


def test_a_gpu_preset_or_one_without_a_figure_has_no_estimate_until_the_team_finished_one(alice_team):
    paper = experiment_estimate(team=alice_team, preset="paper", arms=2, seeds=1)
    assert paper.basis == "none"
    assert paper.text == "2 runs of the paper preset: GPU hours each, no estimate until your team has finished one"
    quick = experiment_estimate(team=alice_team, preset="quick", arms=3, seeds=1)
    assert quick.basis == "none"
    assert quick.text == "3 runs of the quick preset: no figure yet, no estimate until your team has finished one"
    finished_run(alice_team, "paper", 180.0, total_steps=preset("paper").grpo.total_steps)
    measured = experiment_estimate(team=alice_team, preset="paper", arms=2, seeds=1)
    assert measured.basis == "team" and measured.text.startswith("2 runs × 3.0 h ≈ 6.0 h")
    assert "nothing ahead on the gpu queue" in measured.text


def test_past_the_limits_the_estimate_names_the_limit_not_a_number(alice_team):
    seeds = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=10**6)
    assert seeds.basis == "limit" and seeds.minutes_per_run is None
    assert seeds.text == f"1000000 seeds: an experiment takes at most {MAX_SEEDS} per arm"
    runs = experiment_estimate(team=alice_team, preset="smoke", arms=4, seeds=13)
    assert runs.basis == "limit" and f"may start at most {MAX_EXPERIMENT_RUNS}" in runs.text and " h" not in runs.text


def test_the_api_answers_the_estimate_for_the_named_team_and_these_runs(alice, alice_team, bob_team, api):
    finished_run(alice_team, "smoke", 2.0, step_seconds=15, questions=8)
    query = {"preset": "smoke", "arms": 2, "seeds": 3, "team": alice_team.slug}
    shaped = {**query, "overrides": '{"grpo.total_steps": 8}', "benchmarks": "builtin", "questions": 16}
    body = api(alice).get(URL, shaped).json()
    expected = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=3, **SHAPE).to_dict()
    assert {k: v for k, v in body.items() if k != "at"} == {k: v for k, v in expected.items() if k != "at"}
    assert body["basis"] == "team" and body["runs"] == 6 and (body["steps"], body["questions"]) == (8, 16)
    plain = api(alice).get(URL, query).json()
    assert plain["text"] == experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=3).text
    assert api(alice).get(URL, {k: v for k, v in query.items() if k != "team"}).json()["text"] == plain["text"]
    bad = api(alice).get(URL, {**query, "overrides": "{not json"})
    assert bad.status_code == 400 and "overrides" in bad.json()
    foreign = api(alice).get(URL, {"preset": "smoke", "arms": 2, "seeds": 3, "team": bob_team.slug})
    assert foreign.status_code == 400 and "team" in foreign.json()
    assert api(alice).get(URL, {"preset": "nonsense", "arms": 2, "seeds": 3}).status_code == 400
    assert api(None).get(URL, {"preset": "smoke", "arms": 2, "seeds": 3}).status_code in (401, 403)


def test_the_form_states_the_limit_before_typing_and_renders_the_apis_estimate(client, alice, alice_team):
    client.force_login(alice)
    page = client.get("/experiments/new/").content.decode()
    field = page[page.index('name="seeds"') :].split(">", 1)[0]
    assert f'max="{MAX_SEEDS}"' in field
    assert f"at most {MAX_SEEDS}, and at most {MAX_EXPERIMENT_RUNS} runs (arms × seeds)" in page
    assert experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=3).text in html.unescape(page)
    assert 'data-basis="preset"' in page and f'data-teams="{{&quot;{alice_team.pk}&quot;: &quot;' in page


def test_the_form_refuses_more_seeds_than_the_limit(client, alice, alice_team):
    client.force_login(alice)
    data = {"team": alice_team.pk, "name": "many", "preset": "smoke", "arms": ["static"], "seeds": MAX_SEEDS + 1}
    response = client.post("/experiments/new/", {**data, "baseline": "static", "questions": 0})
    assert response.status_code == 400 and not Run.objects.exists()
    assert f"less than or equal to {MAX_SEEDS}" in response.content.decode()
    assert "51 seeds: an experiment takes at most 50 per arm" in response.content.decode()
