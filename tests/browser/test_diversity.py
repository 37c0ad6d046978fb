"""The run page in a real browser, on a run trained through the worker's code path (scripted policy, the offline
`rules` optimizer, real MiniLM embeddings): the diversity chart draws, the banner says why the population collapsed,
a viewer sees it without the Acknowledge button, a member acknowledges it and the banner goes. The checkpoints table
lists the size of each download and the optimizer state only for the newest checkpoint, and a download from the page
is the checkpoint with its population. Another team's run is a 404. The screenshots are the docs' pictures."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from inspo_engine.checkpoints import OPTIMIZER_DIR
from inspo_engine.presets import preset
from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.engine.fakes import ScriptedBackend
from tests.factories import MembershipFactory
from webapp.runs import services
from webapp.runs.models import Checkpoint, PopulationAlarm, Run
from workers.training import run_execute

browser = e2e.browser  # the chromium fixture
STEPS = 40
CANCEL_AT = 36


class TrainedToStep36:
    """The scripted policy, which also writes an optimizer state as the torch backend does, with a user pressing
    cancel while step 36 rolls out: the run stops there with a checkpoint that can resume."""

    name = "scripted"

    def __init__(self, run_id: object) -> None:
        self.inner, self.run_id, self.calls = ScriptedBackend(seed=5), run_id, 0

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == CANCEL_AT:
            run = Run.objects.get(pk=self.run_id)
            services.run_cancel(run=run, user=run.creator)
        return self.inner.rollout(requests, group_size)

    def save(self, directory: Path) -> None:
        self.inner.save(directory)
        (directory / OPTIMIZER_DIR).mkdir()
        (directory / OPTIMIZER_DIR / "trainer_state.pt").write_bytes(b"\2" * 600_000)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def trained_run(alice, alice_team) -> Run:
    """40 planned steps of the smoke preset's population with the offline `rules` optimizer, trained through the
    worker's code path (scripted policy, the real MiniLM embeddings) and cancelled at step 36. Each evolution's new
    candidates clear the collapse that pruning brought about (steps 14 and 22); the last is at step 24, so the
    collapse of step 30 is still active when the run stops."""
    config = preset("smoke").with_overrides(
        {
            "total_steps": STEPS,
            "batch_size": 4,
            "mini_batch_size": 4,
            "micro_batch_size": 4,
            "population_size": 4,
            "prune_every": 4,
            "evolve_every": 8,
            "evolve_until": 24,  # no evolution after the collapse of step 30 renews the population
            "n_candidates": 3,
            "verify_samples": 8,
            "checkpoint.checkpoint_every": 8,
            "checkpoint.keep_last": 2,
            "eval.eval_samples": 4,
        }
    )
    run = services.run_submit(team=alice_team, user=alice, name="rules population", config=config, preset="smoke")
    run_execute(run_id=run.pk, worker="cpu@tests", backend=TrainedToStep36(run.pk))
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
def test_the_run_page_warns_of_a_collapsed_population_and_a_member_acknowledges_it(
    browser, live_server, alice, alice_team, bob, worker_settings, tmp_path
):
    worker_settings.INSPO_ARCHIVE_DIR = tmp_path / "archives"
    run = trained_run(alice, alice_team)
    assert run.status == Run.Status.CANCELLED and run.step == CANCEL_AT, run.error
    alarm = PopulationAlarm.objects.filter(run=run).order_by("step").first()
    assert alarm is not None, "the rules optimizer's candidates are the parent plus a sentence: near-copies"
    viewer = MembershipFactory(user__username="vera", team=alice_team, role="viewer").user

    # A viewer sees the chart and the warning, but cannot acknowledge it.
    pages = signed_in(browser, live_server, viewer)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    page.locator('[data-testid="chart-diversity"] canvas').first.wait_for()
    banner = page.get_by_test_id("collapse-banner")
    banner.wait_for()
    active = PopulationAlarm.objects.filter(run=run, cleared_step__isnull=True).get()
    assert f"The population collapsed at step {active.step}" in banner.inner_text()
    assert page.get_by_test_id("acknowledge-alarm").count() == 0
    alarms = page.get_by_test_id("alarms-table")
    assert alarms.locator("tbody tr").count() == PopulationAlarm.objects.filter(run=run).count()
    pages.assert_no_errors("the run page, as a viewer")
    pages.context.close()

    # A member acknowledges it: the banner goes, the alarm says who.
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    page.locator('[data-testid="chart-diversity"] canvas').first.wait_for()
    page.get_by_test_id("acknowledge-alarm").wait_for()
    page.get_by_test_id("chart-diversity").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    shots = {name: e2e.ARTIFACTS / f"run-diversity-{name}.png" for name in ("banner", "chart", "checkpoints")}
    page.get_by_test_id("collapse-banner").screenshot(path=str(shots["banner"]))
    page.get_by_test_id("chart-diversity").screenshot(path=str(shots["chart"]))
    pages.shoot("run-diversity")
    page.get_by_test_id("acknowledge-alarm").click()
    page.get_by_test_id("collapse-banner").wait_for(state="hidden")
    page.get_by_test_id("alarms-table").filter(has_text="alice").wait_for()
    active.refresh_from_db()
    assert active.acknowledged_by == alice and active.acknowledged_at is not None

    # The checkpoints: the size of each download, the optimizer state only for the newest, and the download itself.
    older, newest = Checkpoint.objects.filter(run=run, available=True).order_by("step")
    assert (older.step, newest.step) == (32, CANCEL_AT) and not older.optimizer_available and newest.optimizer_available
    checkpoints = page.get_by_test_id("checkpoints-table")
    older_row, newest_row = checkpoints.get_by_test_id("checkpoint-32"), checkpoints.get_by_test_id("checkpoint-36")
    assert "not kept" in older_row.inner_text()
    assert newest_row.get_by_test_id("download-checkpoint-optimizer").count() == 1
    assert "The run's checkpoints take" in checkpoints.inner_text()
    with page.expect_download() as download_info:
        newest_row.get_by_test_id("download-checkpoint").click()
    data = Path(download_info.value.path()).read_bytes()
    assert len(data) == newest.archive_bytes
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames() == ["step-000036/inspo_state.json", "step-000036/policy/scripted.json"]
        state = json.loads(archive.extractfile("step-000036/inspo_state.json").read())
    stored = set(run.instructions.values_list("key", flat=True))
    assert {ins["id"] for ins in state["population"]["archive"]} == stored, "the population and lineage it trained with"
    checkpoints.scroll_into_view_if_needed()
    checkpoints.screenshot(path=str(shots["checkpoints"]))
    pages.assert_no_errors("the run page, as a member")

    # Another team's user gets a 404.
    other = signed_in(browser, live_server, bob)
    assert other.goto(f"/runs/{run.pk}/").status == 404
