"""What an experiment would cost, from one source: the selectors' `experiment_estimate`, which the API answers and
the New experiment form renders. It is the median wall time of the team's finished runs of the preset when there are
any, else the preset's stated figure, and it says which; past the seed or run limit it names the limit (one limit,
stated on the form before anything is typed)."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from inspo_engine.experiments import MAX_SEEDS
from tests.factories import RunFactory
from webapp.experiments.models import MAX_EXPERIMENT_RUNS
from webapp.experiments.selectors import MINUTES_PER_RUN, experiment_estimate
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

URL = "/api/v1/experiments/estimate/"


def finished_run(team, preset: str, minutes: float, **fields):
    end = timezone.now()
    return RunFactory(
        team=team,
        preset=preset,
        status=Run.Status.FINISHED,
        started_at=end - timedelta(minutes=minutes),
        finished_at=end,
        **fields,
    )


def test_without_finished_runs_the_estimate_is_the_presets_figure_and_says_so(alice_team):
    minutes = MINUTES_PER_RUN["smoke"]
    assert minutes is not None
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=2)
    assert (estimate.runs, estimate.minutes_per_run, estimate.basis) == (4, minutes, "preset")
    assert estimate.text.startswith(f"4 runs × ~{minutes:.1f} min ≈ {4 * minutes:.0f} min of worker time")
    assert "the smoke preset's figure; your team has no finished smoke run" in estimate.text
    cpu = experiment_estimate(team=alice_team, preset="cpu-demo", arms=4, seeds=3).text
    assert cpu.startswith("12 runs × ~25 min ≈ 5.0 h of worker time")


def test_the_teams_finished_runs_of_the_preset_give_the_median(alice_team, bob_team):
    for minutes in (0.75, 0.8, 1.0, 30.0):  # the 30-minute outlier moves a median little
        finished_run(alice_team, "smoke", minutes)
    finished_run(alice_team, "cpu-demo", 20.0)  # another preset
    finished_run(bob_team, "smoke", 60.0)  # another team
    RunFactory(team=alice_team, preset="smoke", status=Run.Status.FAILED)
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=2)
    assert estimate.basis == "team" and estimate.measured_runs == 4
    assert estimate.minutes_per_run == pytest.approx(0.9)
    assert estimate.text == "4 runs × ~0.9 min ≈ 4 min of worker time (the median of your team's 4 finished smoke runs)"


def test_a_gpu_preset_or_one_without_a_figure_has_no_estimate_until_the_team_finished_one(alice_team):
    paper = experiment_estimate(team=alice_team, preset="paper", arms=2, seeds=1)
    assert paper.basis == "none"
    assert paper.text == "2 runs of the paper preset: GPU hours each, no estimate until your team has finished one"
    quick = experiment_estimate(team=alice_team, preset="quick", arms=3, seeds=1)
    assert quick.basis == "none"
    assert quick.text == "3 runs of the quick preset: no figure yet, no estimate until your team has finished one"
    finished_run(alice_team, "paper", 180.0)
    measured = experiment_estimate(team=alice_team, preset="paper", arms=2, seeds=1)
    assert measured.basis == "team" and measured.text.startswith("2 runs × ~180 min ≈ 6.0 h")


def test_past_the_limits_the_estimate_names_the_limit_not_a_number(alice_team):
    seeds = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=10**6)
    assert seeds.basis == "limit" and seeds.minutes_per_run is None
    assert seeds.text == f"1000000 seeds: an experiment takes at most {MAX_SEEDS} per arm"
    runs = experiment_estimate(team=alice_team, preset="smoke", arms=4, seeds=13)
    assert runs.basis == "limit" and f"may start at most {MAX_EXPERIMENT_RUNS}" in runs.text and " h" not in runs.text


def test_the_api_answers_the_estimate_for_the_named_team(alice, alice_team, bob_team, api):
    finished_run(alice_team, "smoke", 2.0)
    body = api(alice).get(URL, {"preset": "smoke", "arms": 2, "seeds": 3, "team": alice_team.slug}).json()
    assert body == experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=3).__dict__
    assert body["basis"] == "team" and body["runs"] == 6
    assert api(alice).get(URL, {"preset": "smoke", "arms": 2, "seeds": 3}).json() == body  # her only team
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
