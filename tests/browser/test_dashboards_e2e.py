"""The dashboards in a real browser: Debian's chromium driven by Playwright, against the app on a live server and
a real Celery worker. Sign in, submit the smoke preset through the form (on the tiny random-weight Llama: the pages
are the point, not SmolLM2's weights), watch it finish live, click an
instruction in the lineage view (its critique and word diff appear), read trajectories, compare two runs,
download the best instruction — with no JavaScript console errors on any page, at 1280 px and at 390 px wide.
Another team's run is a 404. Screenshots of every page land in INSPO_ARTIFACTS_DIR (var/test-artifacts/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.celery_worker import REPO
from tests.conftest import skip_or_fail, tiny_model_path
from tests.factories import EvaluationFactory, RunFactory, StepMetricFactory
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Run

# Playwright's sync API runs an event loop in this thread; the ORM calls the test makes between page steps are
# still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(os.environ.get("INSPO_ARTIFACTS_DIR", REPO / "var" / "test-artifacts")) / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
RUN_TIMEOUT_MS = 20 * 60 * 1000
REAL_SEND = run_tasks.send


@pytest.fixture
def browser() -> Iterator[Any]:
    executable = shutil.which("chromium")
    if executable is None:
        skip_or_fail("Debian's chromium is not installed (make browser installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed (requirements/dev.txt)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        # While Playwright's loop runs, Django keeps the ORM's connections of this thread apart from the ones it
        # had before; close them here, or they outlive the session and block dropping the test database.
        connections.close_all()
        browser.close()


class Pages:
    """One signed-in browser tab that records console errors and uncaught exceptions per page it visits."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.base_url = base_url
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def goto(self, path: str) -> Any:
        return self.page.goto(self.base_url + path)

    def shoot(self, name: str) -> None:
        """Screenshots at 1280 px and at 390 px wide; the narrow page must not scroll sideways."""
        self.page.screenshot(path=str(ARTIFACTS / f"{name}-1280.png"), full_page=True)
        self.page.set_viewport_size({"width": 390, "height": 844})
        self.page.wait_for_timeout(300)  # charts resize on the next frame
        overflow = self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        self.page.screenshot(path=str(ARTIFACTS / f"{name}-390.png"), full_page=True)
        self.page.set_viewport_size({"width": 1280, "height": 900})
        assert overflow <= 1, f"{name}: the page is {overflow} px wider than a 390 px screen"

    def assert_no_errors(self, where: str) -> None:
        assert not self.errors, f"{where}: {self.errors}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_team_member_follows_a_run_from_the_form_to_the_downloaded_instruction(
    browser, live_server, worker, alice, alice_team, bob, bob_team, monkeypatch, settings
):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    process, log = worker
    pages = Pages(browser, live_server.url)
    page = pages.page

    # Sign in through the form.
    pages.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    # Submit the smoke preset from the runs list's form.
    page.get_by_test_id("submit-run").click()
    page.fill("input[name=name]", "browser smoke")
    page.select_option("select[name=preset]", "smoke")
    page.fill("input[name=model]", tiny_model_path(settings))
    pages.shoot("submit-form")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get(name="browser smoke")
    assert page.url.endswith(f"/runs/{run.pk}/")

    # Watch it finish without reloading: the status and progress update in place.
    page.get_by_test_id("run-status").filter(has_text="running").or_(
        page.get_by_test_id("run-status").filter(has_text="finished")
    ).wait_for(timeout=RUN_TIMEOUT_MS)
    page.get_by_test_id("run-status").filter(has_text="finished").wait_for(timeout=RUN_TIMEOUT_MS)
    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED, f"{run.error}\n{log.read_text()[-3000:]}"
    assert process.poll() is None
    page.get_by_test_id("run-progress").filter(has_text=f"{run.total_steps} / {run.total_steps}").wait_for()
    page.locator('[data-testid="chart-reward_mean"] canvas').first.wait_for()
    pages.shoot("run")
    pages.assert_no_errors("run page")

    # Lineage: click an evolved instruction; its critique and its word diff against the parent appear.
    page.get_by_role("link", name="Lineage").first.click()
    child = run.instructions.exclude(parent=None).exclude(round=None).order_by("birth_step").first()
    assert child is not None, "the smoke run evolved no instruction"
    page.get_by_test_id(f"lineage-node-{child.key}").locator("button").first.click()
    critique = page.get_by_test_id("lineage-critique")
    critique.filter(has_text=child.round.critique[:40]).wait_for()
    diff = page.get_by_test_id("lineage-diff")
    assert diff.locator("ins, del").count() > 0 or "same text" in diff.inner_text().lower()
    assert child.text.split()[0] in page.get_by_test_id("lineage-text").inner_text()
    pages.shoot("lineage")
    pages.assert_no_errors("lineage page")

    # Trajectories: the sampled rollouts of the newest step, tags rendered apart, rewards and gold answers.
    pages.goto(f"/runs/{run.pk}/trajectories/")
    card = page.get_by_test_id("trajectory-card").first
    card.wait_for()
    assert card.get_by_test_id("trajectory-gold").inner_text().strip()
    assert "reward" in card.get_by_test_id("trajectory-reward").inner_text()
    pages.shoot("trajectories")
    pages.assert_no_errors("trajectory viewer")

    # Compare against a second run of the team, with it as the baseline.
    other = RunFactory(team=alice_team, creator=alice, name="static baseline", status=Run.Status.FINISHED)
    other.config["mode"] = "static"
    other.save()
    StepMetricFactory(run=other, step=1, reward_mean=0.1)
    EvaluationFactory(run=other, benchmark="builtin", value=0.0)
    pages.goto(f"/compare/?runs={run.pk}&runs={other.pk}")
    table = page.get_by_test_id("benchmark-table")
    table.wait_for()
    assert "browser smoke" in table.inner_text() and "static baseline" in table.inner_text()
    assert "mode" in page.get_by_test_id("config-diff-table").inner_text()
    page.select_option('[data-testid="baseline-select"]', str(other.pk))
    page.locator('[data-testid="chart-compare-reward_mean"] canvas').first.wait_for()
    pages.shoot("compare")
    pages.assert_no_errors("compare page")

    # Download the best instruction from the run page.
    pages.goto(f"/runs/{run.pk}/")
    with page.expect_download() as download:
        page.get_by_test_id("download-best-instruction").click()
    path = download.value.path()
    run.refresh_from_db()
    assert Path(path).read_text().strip() == run.best_instruction.text.strip()

    # The runs list, then another team's run: a 404, not a glimpse.
    pages.goto("/")
    page.get_by_test_id("run-row").first.wait_for()
    pages.shoot("runs")
    pages.assert_no_errors("runs list")
    theirs = RunFactory(team=bob_team, creator=bob)
    for path in (f"/runs/{theirs.pk}/", f"/runs/{theirs.pk}/lineage/", f"/compare/?runs={theirs.pk}"):
        assert pages.goto(path).status == 404, path
