"""An experiment in a real browser against a live server and a real Celery worker: start a 2-arm × 2-seed smoke
experiment on the tiny random-weight Llama through the form (which shows the run count and cost first), watch the
experiment page fill its verdict table as the four runs finish, with both charts drawn and no console errors; bob's
team gets a 404 for it. With INSPO_DOCS_SCREENSHOTS=1 the page's screenshot is also saved as
docs/experiment-page.png."""

from __future__ import annotations

import json
import os

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.celery_worker import REPO, wait_until_done
from tests.conftest import tiny_model_path
from webapp.experiments.models import Experiment
from webapp.experiments.selectors import experiment_estimate
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture
DOCS_SCREENSHOT = REPO / "docs" / "experiment-page.png"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_two_arm_two_seed_smoke_experiment_fills_its_verdict_table(
    browser, live_server, worker, alice, alice_team, bob, monkeypatch, settings
):
    monkeypatch.setattr(run_tasks, "send", e2e.REAL_SEND)
    process, log = worker
    pages = signed_in(browser, live_server, alice)
    page = pages.page

    page.get_by_role("link", name="Experiments").click()
    page.get_by_test_id("new-experiment").click()
    page.wait_for_selector("#app[data-ready=true]")
    page.fill("input[name=name]", "smoke arms")
    page.select_option("select[name=preset]", "smoke")
    page.fill("input[name=seeds]", "2")
    page.fill("input[name=questions]", "8")
    overrides = {"grpo.total_steps": 2, "backend.model": tiny_model_path(settings), "env.retriever": "bm25"}
    page.fill("textarea[name=overrides]", json.dumps(overrides))

    evaluation = {"benchmarks": ["builtin"], "split": "test", "size": 8}

    def estimate(arms: int) -> str:  # what the API answers the form, for these runs' steps and questions (#54 item 1)
        shaped = {"overrides": overrides, "evaluation": evaluation}
        return experiment_estimate(team=alice_team, preset="smoke", arms=arms, seeds=2, **shaped).text

    page.get_by_test_id("experiment-estimate").filter(has_text=estimate(2)).wait_for()
    page.get_by_label("random-pool").check()
    page.get_by_test_id("experiment-estimate").filter(has_text=estimate(3)).wait_for()
    page.fill("input[name=seeds]", "1000000")
    page.get_by_test_id("experiment-estimate").filter(
        has_text="1000000 seeds: an experiment takes at most 50"
    ).wait_for()
    assert page.locator("input[name=seeds]").get_attribute("max") == "50"
    page.fill("input[name=seeds]", "2")
    page.get_by_test_id("experiment-estimate").filter(has_text=estimate(3)).wait_for()
    page.get_by_label("random-pool").uncheck()
    pages.shoot("experiment-form")
    page.get_by_test_id("start-experiment").click()
    page.wait_for_url("**/experiments/*/")
    experiment = Experiment.objects.get(name="smoke arms")
    assert experiment.arm_names == ["static", "inspo"] and experiment.seeds == [0, 1]
    assert experiment.runs.count() == 4

    # The page refreshes itself: the table is complete once every run has finished and been evaluated. Meanwhile it
    # says how long is left, and keeps the estimate made at submission.
    page.get_by_test_id("experiment-state").filter(has_text="running").wait_for()
    assert " left (" in page.get_by_test_id("experiment-remaining").inner_text()
    assert experiment.estimate["runs"] == 4 and experiment.estimate["steps"] == 2
    for run in experiment.runs.order_by("created_at"):
        done = wait_until_done(run.pk, process, log)
        assert done.status == Run.Status.FINISHED, f"{done.error}\n{log.read_text()[-3000:]}"
    page.locator('[data-testid="experiment-table"][data-complete="true"]').wait_for(timeout=60_000)
    verdict = page.locator('[data-testid="verdict"][data-arm="inspo"]')
    assert verdict.inner_text().startswith("inspo − static:") and "over 2 seeds × 8 questions" in verdict.inner_text()
    assert page.get_by_test_id("arm-em").count() == 2
    # The random-weight Llama answers no question right in either arm: every paired difference is 0, and the page
    # says the interval cannot be estimated rather than showing [+0.0, +0.0] as a finding (#45 item 6).
    assert "so the interval cannot be estimated" in verdict.inner_text()
    assert "no variance" in page.get_by_test_id("arm-difference").last.inner_text()
    assert page.get_by_test_id("experiment-state").inner_text() == "finished"
    assert page.get_by_test_id("cancel-experiment").count() == 0
    # Each run's duration and the estimate's error (#54 item 1); EM in points, the unit in the header (item 6).
    page.get_by_test_id("experiment-estimate-error").filter(has_text="estimated").wait_for()
    said = page.get_by_test_id("experiment-estimate-error").inner_text()
    assert said.startswith("worker time ") and "submission to the end " in said and "the range" in said
    assert all(cell.inner_text().endswith(" min") for cell in page.get_by_test_id("run-worker-minutes").all())
    assert "EM points" in page.get_by_test_id("experiment-table").locator("thead").inner_text()
    page.locator('[data-testid="chart-experiment-reward"] canvas').wait_for()
    page.locator('[data-testid="chart-experiment-em"] canvas').wait_for()
    page.wait_for_timeout(500)  # the charts' first frame
    pages.shoot("experiment")
    if os.environ.get("INSPO_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
    pages.assert_no_errors("the experiment page")

    # Its runs open on the compare page.
    page.get_by_test_id("compare-runs").click()
    page.get_by_test_id("benchmark-table").wait_for()
    assert all(f"runs={run.pk}" in page.url for run in experiment.runs.all())
    pages.assert_no_errors("comparing the experiment's runs")

    # Bob's team: a 404.
    other = signed_in(browser, live_server, bob)
    response = other.goto(f"/experiments/{experiment.pk}/")
    assert response is not None and response.status == 404
