"""Steering a live run from the API and the run page: members send control requests for their team's queued or
running runs, viewers read them, other teams see nothing; bad input is a JSON 400 naming the field; the lineage
carries the author and the pins; a resume's rewind makes requests handled after its checkpoint pending again."""

from __future__ import annotations

import pytest

from tests.factories import InstructionFactory, RunFactory
from webapp.runs import selectors
from webapp.runs.lifecycle import run_discard_after
from webapp.runs.models import ControlRequest, Run

pytestmark = pytest.mark.django_db

TEXT = "Think in <think> </think>, <search> </search> first, then <answer> </answer>."


def control_url(run):
    return f"/api/v1/runs/{run.pk}/control/"


@pytest.fixture
def running(alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    InstructionFactory(run=run, key="ins-0000")
    return run


def test_a_member_injects_and_pins_and_everyone_in_the_team_reads_the_pending_requests(running, mia, victor, api):
    inject = api(mia).post(control_url(running), {"kind": "inject", "text": f"  {TEXT}  "}, format="json")
    assert inject.status_code == 201, inject.json()
    body = inject.json()
    assert body["kind"] == "inject" and body["text"] == TEXT and body["verify"] is True
    assert body["status"] == "pending" and body["author"] == "mia" and body["outcome"] == ""
    assert body["applied_at_step"] is None and body["instruction_id"] is None
    pin = api(mia).post(control_url(running), {"kind": "pin", "instruction_id": "ins-0000"}, format="json")
    assert pin.status_code == 201 and pin.json()["instruction_id"] == "ins-0000" and pin.json()["verify"] is None
    unverified = api(mia).post(
        control_url(running), {"kind": "inject", "text": "Be brief.", "verify": False}, format="json"
    )
    assert unverified.status_code == 201 and unverified.json()["verify"] is False

    listed = api(victor).get(control_url(running))
    assert listed.status_code == 200
    assert [(r["kind"], r["status"]) for r in listed.json()] == [
        ("inject", "pending"),
        ("pin", "pending"),
        ("inject", "pending"),
    ]
    assert listed.json()[0]["verify"] is False  # newest first
    stored = ControlRequest.objects.filter(run=running).order_by("id").first()
    assert stored.author.username == "mia" and stored.payload == {"text": TEXT, "verify": True}


def test_a_viewer_may_not_send_requests(running, victor, api):
    response = api(victor).post(control_url(running), {"kind": "inject", "text": TEXT}, format="json")
    assert response.status_code == 403 and "member" in response.json()["detail"]
    assert not ControlRequest.objects.exists()


def test_another_teams_run_is_a_404_to_read_and_to_steer(running, bob, api):
    assert api(bob).get(control_url(running)).status_code == 404
    response = api(bob).post(control_url(running), {"kind": "inject", "text": TEXT}, format="json")
    assert response.status_code == 404 and response.json()["detail"]
    assert not ControlRequest.objects.exists()


def test_anonymous_requests_are_refused(running, api):
    assert api(None).get(control_url(running)).status_code == 401
    assert api(None).post(control_url(running), {"kind": "pin", "instruction_id": "ins-0000"}).status_code == 401


@pytest.mark.parametrize(
    "status", [Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED, Run.Status.CANCELLING]
)
def test_a_run_that_is_not_queued_or_running_takes_no_requests(alice, alice_team, api, status):
    run = RunFactory(team=alice_team, status=status)
    response = api(alice).post(control_url(run), {"kind": "inject", "text": TEXT}, format="json")
    assert response.status_code == 409
    assert response.json() == {"detail": f"the run is {status}; only a queued or running run takes control requests"}
    assert api(alice).get(control_url(run)).status_code == 200


def test_a_queued_run_takes_requests_for_its_first_step(alice, alice_team, api):
    run = RunFactory(team=alice_team, status=Run.Status.QUEUED)
    response = api(alice).post(control_url(run), {"kind": "inject", "text": TEXT, "verify": False}, format="json")
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "kind"),
        ({"kind": "promote", "instruction_id": "ins-0000"}, "kind"),
        ({"kind": "inject"}, "text"),
        ({"kind": "inject", "text": "   "}, "text"),
        ({"kind": "inject", "text": "x" * 20_001}, "text"),
        ({"kind": "inject", "text": "a\x00b"}, "text"),
        ({"kind": "inject", "text": ["a list"]}, "text"),
        ({"kind": "inject", "text": TEXT, "verify": "maybe"}, "verify"),
        ({"kind": "inject", "text": TEXT, "instruction_id": "ins-0000"}, "instruction_id"),
        ({"kind": "pin"}, "instruction_id"),
        ({"kind": "retire", "instruction_id": "../../etc"}, "instruction_id"),
        ({"kind": "retire", "instruction_id": "ins-0000", "text": TEXT}, "text"),
        ({"kind": "unpin", "instruction_id": "ins-0099"}, "instruction_id"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(running, alice, api, body, field):
    response = api(alice).post(control_url(running), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not ControlRequest.objects.exists()


def test_a_body_that_is_not_json_is_a_400(running, alice, api):
    response = api(alice).post(control_url(running), "{not json", content_type="application/json")
    assert response.status_code == 400 and "detail" in response.json()


def test_the_lineage_names_the_author_and_the_pinned_instructions(running):
    human = InstructionFactory(run=running, key="ins-0001", origin="human", author="mia", birth_step=3)
    pins = [("pin", "ins-0000", 3), ("pin", "ins-0001", 4), ("unpin", "ins-0001", 5), ("pin", "ins-0001", 5)]
    for kind, key, step in pins:
        ControlRequest.objects.create(
            run=running,
            kind=kind,
            payload={"instruction_id": key},
            author_name="mia",
            status="applied",
            applied_at_step=step,
            instruction_key=key,
        )
    ControlRequest.objects.create(  # refused by the engine: it pins nothing
        run=running, kind="unpin", payload={"instruction_id": "ins-0000"}, author_name="mia", status="rejected"
    )
    nodes = {node["id"]: node for node in selectors.run_lineage(run=running)["nodes"]}
    assert nodes["ins-0001"]["author"] == "mia" and nodes["ins-0001"]["origin"] == "human"
    assert nodes["ins-0000"]["author"] is None
    assert nodes["ins-0000"]["pinned"] and nodes["ins-0001"]["pinned"]
    assert human.key in {row["id"] for row in selectors.run_living_instructions(run=running)}


def test_a_rewind_makes_the_requests_handled_after_the_checkpoint_pending_again_keeping_their_step(running):
    def handled(step):
        return ControlRequest.objects.create(
            run=running,
            kind="inject",
            payload={"text": TEXT, "verify": True},
            author_name="mia",
            status="applied",
            outcome="ins-0003 verified",
            applied_at_step=step,
            instruction_key="ins-0003",
        )

    before, after = handled(4), handled(7)
    run_discard_after(run=running, step=5)
    before.refresh_from_db()
    after.refresh_from_db()
    assert (before.status, before.applied_at_step, before.instruction_key) == ("applied", 4, "ins-0003")
    assert (after.status, after.applied_at_step, after.outcome, after.instruction_key) == ("pending", 7, "", "")
    assert [r.pk for r in selectors.control_requests_pending(run_id=running.pk)] == [after.pk]


# -- the run page ------------------------------------------------------------------------------------------------


def test_the_run_page_lets_a_member_steer_and_shows_the_requests(running, client, alice):
    client.force_login(alice)
    page = client.get(f"/runs/{running.pk}/")
    html = page.content.decode()
    assert 'data-testid="inject-form"' in html and 'data-testid="pin-ins-0000"' in html
    assert 'data-testid="retire-ins-0000"' in html
    sent = client.post(f"/runs/{running.pk}/control/", {"kind": "inject", "text": TEXT, "skip_verification": "on"})
    assert sent.status_code == 302
    request = ControlRequest.objects.get(run=running)
    assert request.payload == {"text": TEXT, "verify": False} and request.author_name == "alice"
    client.post(f"/runs/{running.pk}/control/", {"kind": "pin", "instruction_id": "ins-0000"})
    html = client.get(f"/runs/{running.pk}/").content.decode()
    assert html.count('data-testid="control-status">pending<') == 2 and "(unverified)" in html
    assert "Request sent" in html


def test_the_run_page_shows_a_viewer_the_requests_but_no_controls(running, client, victor):
    ControlRequest.objects.create(run=running, kind="pin", payload={"instruction_id": "ins-0000"}, author_name="mia")
    client.force_login(victor)
    html = client.get(f"/runs/{running.pk}/").content.decode()
    assert 'data-testid="control-requests"' in html and "ins-0000" in html
    assert 'data-testid="inject-form"' not in html and 'data-testid="pin-ins-0000"' not in html
    response = client.post(f"/runs/{running.pk}/control/", {"kind": "pin", "instruction_id": "ins-0000"})
    assert response.status_code == 403 and ControlRequest.objects.count() == 1


def test_the_run_page_refuses_another_team_and_says_why_a_finished_run_takes_nothing(alice_team, bob, alice, client):
    finished = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    client.force_login(bob)
    assert client.post(f"/runs/{finished.pk}/control/", {"kind": "inject", "text": TEXT}).status_code == 404
    client.force_login(alice)
    response = client.post(f"/runs/{finished.pk}/control/", {"kind": "inject", "text": TEXT}, follow=True)
    assert "only a queued or running run takes control requests" in response.content.decode()
    assert not ControlRequest.objects.exists()
