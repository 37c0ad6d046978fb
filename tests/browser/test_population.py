"""The run and lineage pages read the column-wise population history in a real browser: the current population
(the last snapshot's members, heaviest first, the best starred), the population chart and an instruction's weight
history draw without a console error."""

from __future__ import annotations

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import (
    InstructionFactory,
    PopulationMemberFactory,
    PopulationSnapshotFactory,
    RunFactory,
    StepMetricFactory,
)
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_a_finished_runs_population_draws_on_the_run_and_lineage_pages(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, step=3, total_steps=3)
    seed = InstructionFactory(run=run, key="ins-0000")
    gone = InstructionFactory(run=run, key="ins-0001", origin="paraphrase", retired_step=2)
    child = InstructionFactory(run=run, key="ins-0002", origin="reflection", parent=seed, birth_step=2)
    history = [
        (1, "step", [(seed, 0.5), (gone, 0.2)]),
        (2, "pruned", [(seed, 0.5)]),
        (2, "evolved", [(seed, 0.5), (child, 0.5)]),
        (3, "step", [(seed, 0.3), (child, 0.6)]),
    ]
    for step, reason, members in history:
        snapshot = PopulationSnapshotFactory(run=run, step=step, reason=reason, best=members[-1][0])
        for instruction, weight in members:
            PopulationMemberFactory(snapshot=snapshot, instruction=instruction, weight=weight, probability=weight)
    for step in (1, 2, 3):
        StepMetricFactory(run=run, step=step)
    run.best_instruction = child
    run.save()

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    current = page.get_by_test_id("current-population")
    assert "After step 3 (step)" in current.inner_text()
    rows = current.locator("tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().startswith("ins-0002 ★") and "0.600" in rows.nth(0).inner_text()
    assert rows.nth(1).inner_text().startswith("ins-0000")
    page.locator('[data-testid="chart-population"] canvas').first.wait_for()
    pages.shoot("run-small-population")
    pages.assert_no_errors("the run page")

    pages.goto(f"/runs/{run.pk}/lineage/?node=ins-0000")
    page.wait_for_selector("#app[data-ready=true]")
    page.locator('[data-testid="chart-weight-history"] canvas').first.wait_for()
    page.locator('[data-testid="chart-lineage"] canvas').first.wait_for()
    pages.shoot("lineage-small-run")
    pages.assert_no_errors("the lineage page")
