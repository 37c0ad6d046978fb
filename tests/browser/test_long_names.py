"""Long names in a real browser: a 200-character run or experiment name is cut with an ellipsis on the lists, the
compare picker and tables (the whole name in its title), so Status, Progress and Actions stay in view at 1280 px and
the compare page does not grow sideways. No console errors."""

from __future__ import annotations

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import RunFactory
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture

SPACED = ("a run name that goes on " * 9)[:200]
"""200 characters with spaces, which wrap."""
UNBROKEN = "n" * 200
"""200 characters without a space, which do not."""


def right_edge(page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box["x"] + box["width"]


def is_cut(page, selector: str) -> bool:
    """Whether the element's text is wider than the element (the ellipsis shows)."""
    return page.locator(selector).first.evaluate("e => e.scrollWidth > e.clientWidth")


@pytest.mark.django_db(transaction=True)
def test_long_run_names_leave_status_progress_and_actions_in_view(browser, live_server, alice, alice_team):
    for name in (SPACED, UNBROKEN):
        RunFactory(team=alice_team, creator=alice, name=name, status=Run.Status.RUNNING, step=1, total_steps=4)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/")
    width = page.viewport_size["width"]
    for selector in ("td.status", "tr[data-testid=run-row] td.row-actions"):
        assert right_edge(page, selector) <= width, f"{selector} is out of view"
    names = page.get_by_test_id("run-name")
    assert {names.nth(i).get_attribute("title") for i in range(2)} == {SPACED, UNBROKEN}
    assert is_cut(page, "[data-testid=run-name]")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    pages.shoot("runs-long-names")
    pages.assert_no_errors("the runs list with long names")


@pytest.mark.django_db(transaction=True)
def test_long_experiment_names_leave_the_state_in_view(browser, live_server, alice, alice_team):
    from webapp.experiments.services import experiment_submit

    experiment_submit(
        team=alice_team, user=alice, name=UNBROKEN, spec={"preset": "smoke", "arms": ["static", "inspo"], "seeds": 1}
    )
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/experiments/")
    width = page.viewport_size["width"]
    assert right_edge(page, "tr[data-testid=experiment-row] td.status") <= width
    assert page.get_by_test_id("experiment-name").get_attribute("title") == UNBROKEN
    assert is_cut(page, "[data-testid=experiment-name]")
    pages.assert_no_errors("the experiments list with a long name")


@pytest.mark.django_db(transaction=True)
def test_the_compare_page_stays_as_wide_as_the_screen_with_long_names(browser, live_server, alice, alice_team):
    runs = [
        RunFactory(team=alice_team, creator=alice, name=f"{i}{UNBROKEN[1:]}", status=Run.Status.FINISHED)
        for i in range(3)
    ]
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/compare/?" + "&".join(f"runs={run.pk}" for run in runs))
    page.wait_for_selector("#app[data-ready=true]")
    page.locator("[data-testid=run-choices] .name-cut").first.wait_for()
    width = page.viewport_size["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    choices = page.locator("[data-testid=run-choices] li")
    heights = {round(choices.nth(i).bounding_box()["height"]) for i in range(3)}
    assert max(heights) < 40, f"picker rows of {heights} px: names wrap"  # one line each
    assert page.locator("[data-testid=run-choices] .name-cut").first.get_attribute("title").endswith(UNBROKEN[1:])
    pages.shoot("compare-long-names")
    pages.assert_no_errors("the compare page with long names")
