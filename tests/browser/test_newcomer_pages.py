"""The pages a newcomer met rough edges on, in chromium: an owner stores a key on the team's Keys page and never sees
its value again; the navigation's Documentation link opens the built site; a refused evaluation keeps its form open
with the input and the error beside the field, naming no server path; a failed run without a checkpoint offers no
Resume (#45 items 3, 7 and 8)."""

from __future__ import annotations

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import CheckpointFactory, RunFactory
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_an_owner_stores_a_key_and_the_page_never_shows_its_value(browser, live_server, alice, alice_team):
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/accounts/teams/{alice_team.slug}/")
    page.get_by_role("link", name="Keys").first.click()
    page.wait_for_url(f"**/accounts/teams/{alice_team.slug}/keys/")
    page.fill("input[name=name]", "wandb")
    page.fill("input[name=value]", "sk-do-not-show-1234")
    page.get_by_role("button", name="Store the key").click()
    page.locator('[data-testid="team-secret"][data-name="wandb"]').wait_for()
    assert "sk-do-not-show-1234" not in page.content()
    assert page.input_value("input[name=value]") == ""
    pages.assert_no_errors("the Keys page")


@pytest.mark.django_db(transaction=True)
def test_the_navigation_opens_the_documentation(browser, live_server, alice, settings, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>INSPO</title><h1>INSPO documentation</h1>")
    settings.INSPO_DOCS_DIR = site
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    page.get_by_role("link", name="Documentation").first.click()
    page.wait_for_url("**/docs/")
    assert page.locator("h1").inner_text() == "INSPO documentation"


@pytest.mark.django_db(transaction=True)
def test_a_refused_evaluation_keeps_its_form_and_a_failed_run_without_a_checkpoint_offers_no_resume(
    browser, live_server, alice, alice_team, settings, tmp_path
):
    settings.INSPO_DATA_DIR = tmp_path / "data"
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    CheckpointFactory(run=run)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    page.get_by_text("Evaluate a checkpoint").click()
    page.fill("input[name=benchmarks]", "builtin, nq/test.jsonl")
    page.fill("input[name=limit]", "7")
    page.get_by_role("button", name="Evaluate").click()
    box = page.get_by_test_id("evaluate")
    box.get_by_text("does not exist in your team's data directory").wait_for()
    assert box.get_attribute("open") is not None
    assert page.input_value("input[name=benchmarks]") == "builtin, nq/test.jsonl"
    assert page.input_value("input[name=limit]") == "7"
    assert str(tmp_path) not in page.content()

    failed = RunFactory(team=alice_team, creator=alice, status=Run.Status.FAILED, error="boom")
    pages.goto(f"/runs/{failed.pk}/")
    page.get_by_test_id("no-resume").wait_for()
    assert page.get_by_test_id("resume-run").count() == 0
