"""A real first run's page: seed 1 of the quick preset as shipped (the `inspo` arm of the LoRA experiment, whose
runs docs/experiments/lora/runs.tar.gz holds), imported as a CLI run. Its page opens with what the run learnt, from
the run's own evaluations: EM 0.000 before training and 0.097 after on the 195 test questions, and its best-weighted
instruction not yet distinguishable from the others (#54 item 3). With
INSPO_DOCS_SCREENSHOTS=1 the page's opening is saved as docs/first-run-quick.png, the quickstart's picture."""

from __future__ import annotations

import os
import tarfile

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.celery_worker import REPO
from webapp.runs.imports import run_import

browser = e2e.browser  # the chromium fixture
RUNS = REPO / "docs" / "experiments" / "lora" / "runs.tar.gz"
DOCS_SCREENSHOT = REPO / "docs" / "first-run-quick.png"


@pytest.mark.django_db(transaction=True)
def test_a_real_quick_runs_page_says_what_it_learnt(browser, live_server, alice, alice_team, settings, tmp_path):
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    with tarfile.open(RUNS) as archive:
        archive.extractall(tmp_path / "source", filter="data")
    run = run_import(team=alice_team, user=alice, directory=tmp_path / "source" / "exp-lora" / "inspo-s1", name="quick")
    assert run.status == "finished" and run.total_steps == 12

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    learnt = page.get_by_test_id("run-learnt")
    facts = learnt.get_by_test_id("learnt-facts").inner_text()
    assert "0.000" in facts and "0.097" in facts, facts  # the untrained and the trained evaluation, 195 questions
    verdict = learnt.get_by_test_id("learnt-verdict").inner_text()
    assert verdict == "This run taught correctness: exact match rose beyond its 95 % interval.", verdict
    # its population cannot tell ins-0007 from the others (intervals over 6 questions overlap): no "won"
    assert "ins-0007 has a recent reward of 0.497 [0.130, 0.863] over 6 questions; every other member's" in facts
    assert "The best-weighted instruction is ins-0007 (not yet distinguishable from the others)" in facts
    assert "won" not in facts, facts
    page.locator('[data-testid="chart-reward_mean"] canvas').first.wait_for()
    pages.assert_no_errors("a real quick run's page")
    if os.environ.get("INSPO_DOCS_SCREENSHOTS") == "1":
        page.set_viewport_size({"width": 1280, "height": 1500})
        page.wait_for_timeout(500)  # charts resize on the next frame
        page.screenshot(path=str(DOCS_SCREENSHOT), clip={"x": 0, "y": 0, "width": 1280, "height": 1500})
