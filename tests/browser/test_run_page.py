"""The run page lists what the run's config changed from its preset, from the run's `preset_diff` in the API."""

from __future__ import annotations

import pytest

from inspo_engine.presets import preset
from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import RunFactory
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_the_run_page_shows_the_configs_changes_from_its_preset(browser, live_server, alice, alice_team):
    changed = preset("smoke").with_overrides({"grpo.lr": 2e-6, "mode": "static"}).to_dict()
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke", config=changed)
    unchanged = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke")

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    changes = page.get_by_test_id("config-vs-preset")
    changes.locator("tbody tr").first.wait_for()
    rows = [row.inner_text().split("\t") for row in changes.locator("tbody tr").all()]
    assert [row[0] for row in rows] == ["grpo.lr", "mode"]  # field, the preset's value, this run's
    assert rows[0][2] == "0.000002" and float(rows[0][1]) == preset("smoke").grpo.lr
    assert rows[1] == ["mode", "online", "static"]
    pages.assert_no_errors("the run page")

    pages.goto(f"/runs/{unchanged.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    assert "the “smoke” preset unchanged" in page.get_by_test_id("config-vs-preset").inner_text()
    pages.assert_no_errors("the run page of an unchanged run")
