"""Steering a running run from its page in a real browser: a member injects an instruction with "skip verification"
and pins another, sees both requests pending, and after the engine's outcomes reach the database (through the
worker's own sink) sees them applied with what happened; a viewer sees the requests and no controls."""

from __future__ import annotations

import pytest

from inspo_engine.events import ControlHandled, InstructionAdded, InstructionInfo
from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import InstructionFactory, PopulationMemberFactory, PopulationSnapshotFactory, RunFactory
from webapp.runs.models import ControlRequest, Run
from webapp.runs.recorder import DatabaseSink

browser = e2e.browser  # the chromium fixture

TEXT = "Search with <search> </search> before you answer in <answer> </answer>; think in <think> </think>."


@pytest.mark.django_db(transaction=True)
def test_a_member_injects_and_pins_from_the_run_page_and_sees_the_outcomes(
    browser, live_server, alice, alice_team, victor
):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING, step=6, total_steps=20)
    seed = InstructionFactory(run=run, key="ins-0000", text="Answer the question; search when unsure.")
    other = InstructionFactory(run=run, key="ins-0001", origin="paraphrase", parent=seed)
    snapshot = PopulationSnapshotFactory(run=run, step=6, best=seed)
    for instruction, weight in ((seed, 0.6), (other, 0.4)):
        PopulationMemberFactory(snapshot=snapshot, instruction=instruction, weight=weight, probability=weight)

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    steering = page.get_by_test_id("steering")
    assert "ins-0000" in steering.get_by_test_id("steer-instructions").inner_text()
    page.get_by_label("Instruction to inject").fill(TEXT)
    page.get_by_test_id("inject-skip-verification").check()
    page.get_by_test_id("inject-submit").click()
    page.wait_for_selector("#app[data-ready=true]")
    assert "Request sent" in page.content()
    page.get_by_test_id("pin-ins-0001").click()
    page.wait_for_selector("#app[data-ready=true]")

    requests = page.get_by_test_id("control-requests")
    rows = requests.locator("tr[data-request]")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().split("\t")[1:4] == ["pin ins-0001", "alice", "pending"]
    assert "inject (unverified): Search with" in rows.nth(1).inner_text() and "pending" in rows.nth(1).inner_text()
    inject, pin = ControlRequest.objects.filter(run=run).order_by("id")
    assert inject.payload == {"text": TEXT, "verify": False} and pin.payload == {"instruction_id": "ins-0001"}

    # The engine handles both before step 7; the worker's sink stores what it reports.
    sink = DatabaseSink(run.pk)
    sink.emit(InstructionAdded(7, InstructionInfo("ins-0002", TEXT, "human", None, 7, "alice")))
    sink.emit(ControlHandled(7, str(inject.pk), "inject", "applied", "ins-0002 joined unverified, as asked", "alice"))
    sink.emit(ControlHandled(7, str(pin.pk), "pin", "applied", "ins-0001 pinned", "alice", "ins-0001"))
    sink.flush()
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    rows = page.get_by_test_id("control-requests").locator("tr[data-request]")
    assert [row.get_by_test_id("control-status").inner_text() for row in rows.all()] == ["applied", "applied"]
    cells = rows.nth(1).inner_text().split("\t")
    assert cells[4] == "ins-0002 joined unverified, as asked" and cells[5].strip() == "7"
    assert "pinned" in page.locator('tr[data-instruction="ins-0001"]').inner_text()
    assert "human (alice)" in page.locator('tr[data-instruction="ins-0002"]').inner_text()
    assert page.get_by_test_id("unpin-ins-0001").is_visible()
    pages.shoot("run-steering")
    steering.screenshot(path=str(e2e.ARTIFACTS / "run-steering-section.png"))
    pages.assert_no_errors("the run page with control requests")

    viewer = signed_in(browser, live_server, victor)
    viewer.goto(f"/runs/{run.pk}/")
    viewer.page.wait_for_selector("#app[data-ready=true]")
    assert viewer.page.get_by_test_id("control-requests").locator("tr[data-request]").count() == 2
    assert viewer.page.get_by_test_id("inject-form").count() == 0
    assert viewer.page.get_by_test_id("pin-ins-0000").count() == 0
    viewer.assert_no_errors("the run page, for a viewer")
