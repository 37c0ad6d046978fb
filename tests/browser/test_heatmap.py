"""The run page's instruction × checkpoint heatmap in chromium: a member chooses instructions, checkpoints and
questions and sees the cost change before starting (a choice over the bound cannot be sent); starts it; the cells
fill in without a reload while the worker code scores them with the tiny Llama's checkpoints; a click on a cell
shows its answers. No console errors; screenshots at 1280 and 390 px, and the section alone as heatmap.png."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.celery_worker import REPO
from tests.workers.test_heatmap import SEED, tiny_run
from webapp.runs.models import Heatmap, Instruction
from workers.heatmap import heatmap_execute

browser = e2e.browser  # the chromium fixture


def score(heatmap_id: int) -> None:
    """The worker's code, in a thread of its own with its own database connection."""
    try:
        heatmap_execute(heatmap_id=heatmap_id, worker="cpu@browser")
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_member_prices_starts_and_reads_a_heatmap_on_the_run_page(
    browser,
    live_server,
    alice,
    alice_team,
    tiny_data_dir,
    settings,
    tmp_path,
    enqueued,
):
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    settings.INSPO_CACHE_DIR = REPO / "cache"
    settings.INSPO_HEATMAP_MAX_ANSWERS = 1000
    run = tiny_run(alice_team, alice, tiny_data_dir)
    # A child that only appends to its parent: both rows open with the same words, so each is shown by what follows.
    Instruction.objects.filter(run=run, key="ins-0001").update(text=f"{SEED} Reply with the answer only.")

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    page.get_by_test_id("heatmap-list").filter(has_text="No heatmap yet.").wait_for()
    page.get_by_text("Evaluate instructions × checkpoints").click()

    cost = page.get_by_test_id("heatmap-cost")
    assert cost.inner_text() == (
        "Cost: 2 instructions × 2 checkpoints = 4 cells × 50 questions = 200 greedy answers (at most 1000)."
    )
    page.fill("input[name=sample_size]", "300")
    assert "= 1200 greedy answers: more than the 1000 a heatmap may cost." in cost.inner_text()
    assert page.get_by_test_id("heatmap-submit").is_disabled()
    page.fill("input[name=sample_size]", "2")
    page.get_by_label("step 4", exact=True).uncheck()
    assert cost.inner_text().startswith("Cost: 2 instructions × 1 checkpoint = 2 cells × 2 questions")
    page.get_by_label("step 4", exact=True).check()
    assert "4 cells × 2 questions = 8 greedy answers" in cost.inner_text()
    page.get_by_test_id("heatmap-submit").click()
    page.wait_for_url(f"**/runs/{run.pk}/")
    page.get_by_text("Heatmap queued").wait_for()

    heatmap = Heatmap.objects.get(run=run)
    assert heatmap.sample_size == 2 and heatmap.cells.count() == 4 and enqueued[-1][1] == [heatmap.pk]
    page.get_by_test_id("heatmap").filter(has_text="0 of 4 cells").wait_for()

    # The worker's code scores it (in this process; tests/workers runs it in a Celery worker): the page fills in.
    worker = threading.Thread(target=score, args=(heatmap.pk,))
    worker.start()
    page.get_by_test_id("heatmap").filter(has_text="finished").wait_for(timeout=10 * 60 * 1000)
    worker.join()
    heatmap.refresh_from_db()
    assert heatmap.status == Heatmap.Status.FINISHED, heatmap.error
    child = page.get_by_test_id("heatmap-row-text-ins-0001").inner_text()
    assert "Reply with the answer only" in child, child
    assert page.get_by_test_id("heatmap-row-text-ins-0000").inner_text() != child
    same = page.get_by_test_id("heatmap-row-text-ins-0000")  # the seed is the shared opening and nothing more
    assert same.inner_text() == "(same text)" and "the opening every row shares" in (same.get_attribute("title") or "")
    assert (
        "“(same text)” marks an instruction that is the opening"
        in page.get_by_test_id("heatmap-opening-note").inner_text()
    )
    done = page.locator('[data-testid="heatmap-cell"][data-done]')
    assert done.count() == 4
    em = heatmap.cells.get(instruction__key="ins-0001", checkpoint__step=4).em
    corner = page.locator('[data-testid="heatmap-cell"][data-cell="ins-0001@4"]')
    assert corner.inner_text().startswith(f"{em:.3f}")

    corner.click()
    detail = page.get_by_test_id("heatmap-cell-detail")
    detail.get_by_test_id("heatmap-cell-summary").filter(has_text="2 questions").wait_for()
    assert detail.get_by_test_id("heatmap-answer").count() == 2
    assert "ins-0001 with the checkpoint of step 4" in detail.inner_text()
    page.get_by_test_id("heatmaps").screenshot(path=str(e2e.ARTIFACTS / "heatmap.png"))
    pages.shoot("run-heatmap")
    pages.assert_no_errors("the run page's heatmap")
