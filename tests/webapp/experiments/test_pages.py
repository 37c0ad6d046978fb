"""The experiment pages: the form starts an experiment and shows the run count and cost first; the experiment page
shows the table, the verdicts, each run linked and a compare link; bob's team gets 404 on every page of alice's
experiment; a viewer reads but cannot start or cancel."""

from __future__ import annotations

import html

import pytest

from tests.webapp.experiments.conftest import finish
from webapp.experiments.models import Experiment
from webapp.experiments.selectors import experiment_estimate
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def test_the_form_shows_the_run_count_and_cost_before_anything_is_sent(client, alice, alice_team):
    client.force_login(alice)
    page = client.get("/experiments/new/").content.decode()
    estimate = experiment_estimate(team=alice_team, preset="smoke", arms=2, seeds=3)  # static and inspo, 3 seeds
    assert estimate.runs == 6 and estimate.text in html.unescape(page)
    assert 'name="arms" value="random-pool"' in page and not Run.objects.exists()


def test_the_form_starts_an_experiment_and_lands_on_its_page(client, alice, alice_team):
    client.force_login(alice)
    data = {"team": alice_team.pk, "name": "form", "preset": "smoke", "arms": ["static", "random-pool"], "seeds": 2}
    data |= {"baseline": "static", "questions": 8, "overrides": '{"total_steps": 2}'}
    response = client.post("/experiments/new/", data)
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.arm_names == ["static", "random-pool"] and experiment.seeds == [0, 1]
    assert {r.config["grpo"]["total_steps"] for r in experiment.runs.all()} == {2}
    assert experiment.evaluation["size"] == 8
    assert {r.config["eval"]["eval_samples"] for r in experiment.runs.all()} == {8}


def test_a_bad_override_in_the_form_is_shown_on_its_field(client, alice, alice_team):
    client.force_login(alice)
    data = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "arms": ["static"], "seeds": 1, "questions": 0}
    response = client.post("/experiments/new/", {**data, "baseline": "static", "overrides": '{"grpo.lr": -1}'})
    assert response.status_code == 400 and "overrides.grpo.lr" in response.content.decode()
    assert not Experiment.objects.exists()


def test_the_form_takes_several_benchmarks_and_every_run_is_evaluated_on_each(client, alice, alice_team, nq_file):
    client.force_login(alice)
    data = {"team": alice_team.pk, "name": "two", "preset": "smoke", "arms": ["static", "inspo"], "seeds": 1}
    data |= {"baseline": "static", "questions": 8, "benchmarks": "builtin, nq.jsonl"}
    assert client.post("/experiments/new/", data).status_code == 302
    experiment = Experiment.objects.get()
    assert experiment.evaluation_spec["benchmarks"] == ["builtin", "nq.jsonl"]
    assert {len(r.config["eval"]["benchmarks"]) for r in experiment.runs.all()} == {2}
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'data-testid="experiment-benchmarks">builtin, nq.jsonl,' in page


def test_a_benchmark_outside_the_teams_data_is_shown_on_the_benchmarks_field(client, alice, alice_team):
    client.force_login(alice)
    data = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "arms": ["static"], "seeds": 1, "questions": 0}
    response = client.post("/experiments/new/", {**data, "baseline": "static", "benchmarks": "builtin, /etc/passwd"})
    html = response.content.decode()
    row = html[html.index('for="id_benchmarks"') : html.index('for="id_questions"')]
    assert response.status_code == 400 and "/etc/passwd" in row and "errorlist" in row
    assert not Experiment.objects.exists()


def test_the_page_of_several_benchmarks_shows_each_ones_verdicts_and_table_1_with_the_average(
    client, alice, api, nq_file
):
    from tests.webapp.experiments.conftest import spec

    response = api(alice).post(
        "/api/v1/experiments/",
        {"name": "two", **spec(evaluation={"benchmarks": ["builtin", "nq.jsonl"]})},
        format="json",
    )
    experiment = Experiment.objects.get(pk=response.json()["id"])
    for run in experiment.runs.all():
        stored = run.config["eval"]["benchmarks"][1]
        finish(run, correct={"builtin": 2 + 2 * (run.arm == "inspo"), stored: 6})
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "inspo − static on Avg. of 2 benchmarks (each weighted 1/2): +12.5 EM points" in page
    assert 'data-testid="benchmark-verdict" data-arm="inspo" data-benchmark="builtin">inspo − static on builtin' in page
    assert 'data-benchmark="nq.jsonl">inspo − static on nq.jsonl: +0.0 EM points' in page
    # One convention (#54 item 6): EM points as the verdicts write them, signed where a difference, the unit in
    # every column's header.
    row = page[page.index('data-testid="benchmark-row" data-arm="inspo"') :].split("</tr>")[0]
    assert 'data-column="builtin">50.0 <span class="muted">+25.0 [' in row and 'data-column="nq.jsonl">75.0' in row
    assert 'data-column="average">62.5' in row and "Avg.: EM points" in page
    assert "builtin: EM points (± vs static)" in page and "EM − static, EM points [0.95 interval]" in page
    arm = page[page.index('data-testid="arm-row" data-arm="inspo"') :].split("</tr>")[0]
    assert 'data-testid="arm-em">62.5<' in arm and 'data-testid="arm-difference">+12.5 [' in arm


def test_the_page_shows_the_table_verdicts_runs_and_a_compare_link(client, alice, experiment):
    runs = {(r.arm, r.seed): r for r in experiment.runs.all()}
    for (arm, seed), run in runs.items():
        finish(run, correct=2 + seed + (arm == "inspo"))
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'data-testid="verdict" data-arm="inspo"' in page and "inspo − static" in page
    assert 'data-complete="true"' in page
    for run in runs.values():
        assert f'href="/runs/{run.pk}/"' in page and f"runs={run.pk}" in page
    assert 'data-testid="cancel-experiment"' not in page  # it has ended
    assert 'data-testid="benchmark-verdicts"' not in page  # one benchmark: its verdicts are the ones above


def test_a_failed_run_leaves_the_table_over_the_finished_seeds_saying_which_are_missing(client, alice, experiment):
    for run in experiment.runs.exclude(arm="inspo", seed=1):
        finish(run, correct=3)
    Run.objects.filter(experiment=experiment, arm="inspo", seed=1).update(status=Run.Status.FAILED, error="boom")
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'data-testid="missing"' in page and "inspo seed 1" in page and "boom" in page


def test_each_run_page_links_back_to_its_experiment_with_its_arm_and_seed(client, alice, experiment):
    client.force_login(alice)
    run = experiment.runs.get(arm="inspo", seed=1)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/experiments/{experiment.pk}/"' in page and "arm <code>inspo</code>, seed 1" in page


def test_the_list_and_nav_lead_to_the_experiment(client, alice, experiment):
    client.force_login(alice)
    page = client.get("/experiments/").content.decode()
    assert f'href="/experiments/{experiment.pk}/"' in page and 'href="/experiments/"' in page


def test_bob_gets_404_on_every_page_of_alices_experiment(client, bob, experiment):
    client.force_login(bob)
    assert client.get(f"/experiments/{experiment.pk}/").status_code == 404
    assert client.post(f"/experiments/{experiment.pk}/cancel/").status_code == 404
    assert experiment.name not in client.get("/experiments/").content.decode()
    assert Experiment.objects.get().status == Experiment.Status.RUNNING


def test_a_viewer_sees_the_page_but_no_form_and_no_cancel(client, victor, experiment):
    client.force_login(victor)
    page = client.get(f"/experiments/{experiment.pk}/")
    assert page.status_code == 200 and 'data-testid="cancel-experiment"' not in page.content.decode()
    assert client.get("/experiments/new/").status_code == 403
    assert client.post(f"/experiments/{experiment.pk}/cancel/").status_code == 403
    assert experiment.runs.filter(status=Run.Status.QUEUED).count() == 4


def test_a_member_cancels_from_the_page(client, mia, experiment):
    client.force_login(mia)
    response = client.post(f"/experiments/{experiment.pk}/cancel/")
    assert response.status_code == 302
    assert set(experiment.runs.values_list("status", flat=True)) == {"cancelled"}


def test_an_experiment_name_past_200_characters_is_refused_with_a_message_not_cut(client, alice, alice_team):
    """A 5,000-character name was cut to 200 by the input's maxlength and the experiment started."""
    import re

    client.force_login(alice)
    form = client.get("/experiments/new/").content.decode()
    name_input = re.search(r'<input[^>]*name="name"[^>]*>', form).group(0)
    assert "maxlength" not in name_input
    data = {"team": alice_team.pk, "name": "e" * 5000, "preset": "smoke", "arms": ["static"], "seeds": 1}
    response = client.post("/experiments/new/", {**data, "baseline": "static", "questions": 0})
    html = response.content.decode()
    row = html[html.index('for="id_name"') : html.index('for="id_preset"')]
    assert response.status_code == 400 and "at most 200 characters (it has 5000)" in row
    assert not Experiment.objects.exists()


def test_the_list_and_the_page_cut_long_names_and_keep_them_whole_in_their_titles(client, alice, alice_team):
    import re

    from tests.webapp.experiments.conftest import spec
    from webapp.experiments.services import experiment_submit

    long = "a long experiment name " * 8 + "end"
    experiment = experiment_submit(team=alice_team, user=alice, name=long, spec=spec(seeds=1))
    client.force_login(alice)
    listing = client.get("/experiments/").content.decode()
    assert re.search(rf'<a class="name-cut" href="/experiments/{experiment.pk}/" title="{long}"', listing)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    run = experiment.runs.first()
    assert f'<a class="name-cut" href="/runs/{run.pk}/" title="{run.name}">' in page


def test_the_page_shows_the_time_left_then_each_runs_durations_and_the_estimates_error(client, alice, experiment):
    from datetime import timedelta

    from django.utils import timezone

    kept = experiment.estimate  # made at submission: no finished smoke run yet, so the preset's figure
    assert kept["basis"] == "preset" and kept["runs"] == 4
    assert kept["worker_minutes"] == pytest.approx([4 * 4.3, 4 * 5.0, 4 * 5.6])
    client.force_login(alice)
    page = html.unescape(client.get(f"/experiments/{experiment.pk}/").content.decode())
    left = page[page.index('data-testid="experiment-remaining"') :].split("</dd>")[0]
    assert "about 20 min left (4 of its runs still to end)" in left  # four queued runs of 5.0 min, one at a time
    assert kept["text"] in page

    start = timezone.now() - timedelta(hours=1)
    Experiment.objects.filter(pk=experiment.pk).update(created_at=start)
    clock = start
    for run, worker in zip(experiment.runs.order_by("arm", "seed"), (4.0, 5.0, 6.0, 7.0), strict=True):
        finish(run, correct=2)
        began, clock = clock + timedelta(minutes=1), clock + timedelta(minutes=1 + worker)
        Run.objects.filter(pk=run.pk).update(created_at=start, started_at=began, finished_at=clock)
    detail = client.get(f"/api/v1/experiments/{experiment.pk}/").json()["timing"]
    # Listed static first (the experiment's order); inspo's two ran first, one at a time, a minute apart.
    assert [r["worker_minutes"] for r in detail["runs"]] == pytest.approx([6.0, 7.0, 4.0, 5.0])
    assert [r["wait_minutes"] for r in detail["runs"]] == pytest.approx([12.0, 19.0, 1.0, 6.0])
    assert detail["worker_minutes"] == pytest.approx(22.0) and detail["elapsed_minutes"] == pytest.approx(26.0)
    error = detail["worker_error"]
    assert error["estimated"] == pytest.approx(20.0) and error["error_minutes"] == pytest.approx(2.0)
    assert error["within_range"] and error["error_percent"] == pytest.approx(10.0)
    assert not detail["finish_error"]["within_range"]  # 26 min against 17.2–22.4: the runs waited between
    page = html.unescape(client.get(f"/experiments/{experiment.pk}/").content.decode())
    assert 'data-testid="experiment-remaining"' not in page
    assert 'data-testid="run-worker-minutes">6.0 min<' in page
    said = page[page.index('data-testid="experiment-estimate-error"') :].split("</p>")[0]
    assert "worker time 22 min against 20 min estimated (17–22 min): +2.0 min, +10 %, within the range" in said
    assert "submission to the end 26 min against 20 min estimated (17–22 min): +6.0 min, +30 %, outside" in said
