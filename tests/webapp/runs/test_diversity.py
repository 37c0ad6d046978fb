"""Population diversity and its collapse alarm in the web app: a run trained through the worker code path (the
scripted policy, the real MiniLM embeddings) stores a diversity record per population record and its alarms; the API
serves them column-wise with the run's thresholds; members acknowledge an alarm, viewers only read, other teams get a
404; a resumed run's rewind forgets what came after its checkpoint."""

from __future__ import annotations

import pytest

from tests.conftest import scripted_config
from tests.engine.fakes import ScriptedBackend
from tests.factories import RunFactory
from webapp.runs.lifecycle import run_discard_after
from webapp.runs.models import DiversityRecord, PopulationAlarm, PopulationSnapshot, RunNote
from webapp.runs.services import run_submit
from workers.training import run_execute

pytestmark = pytest.mark.django_db

ALWAYS_COLLAPSED = {"population.collapse_entropy": 1.0, "population.collapse_steps": 2}
"""Every population of two or more looks collapsed (its normalised entropy is at most 1): the alarm trips at step 1."""


def train(alice, alice_team, **overrides):
    run = run_submit(team=alice_team, user=alice, name="diverse", config=scripted_config(**overrides))
    run_execute(run_id=run.pk, worker="cpu@tests", backend=ScriptedBackend(seed=5))
    run.refresh_from_db()
    return run


@pytest.fixture
def collapsed_run(alice, alice_team, gemini_url, worker_settings):
    return train(alice, alice_team, **ALWAYS_COLLAPSED)


def diversity(client, run):
    response = client.get(f"/api/v1/runs/{run.pk}/diversity/")
    assert response.status_code == 200, response.content
    return response.json()


def acknowledge(client, run, alarm_id):
    return client.post(f"/api/v1/runs/{run.pk}/alarms/{alarm_id}/acknowledge/")


def test_every_population_record_has_its_diversity_and_alarms_follow_the_rule(
    alice, alice_team, api, gemini_url, worker_settings
):
    run = train(alice, alice_team)
    body = diversity(api(alice), run)
    series = body["series"]
    snapshots = list(PopulationSnapshot.objects.filter(run=run).order_by("step", "id").values_list("step", "reason"))
    assert list(zip(series["step"], series["reason"], strict=True)) == snapshots
    assert all(len(column) == len(snapshots) for column in series.values())
    first = DiversityRecord.objects.filter(run=run).order_by("step", "id").first()
    assert series["cosine_mean"][0] == first.cosine_mean and series["strategies"][0] == first.strategies
    assert 1 <= max(series["strategies"]) <= 4 and all(
        0 <= e <= 1 for e in series["entropy_normalised"] if e is not None
    )
    assert body["settings"] == {
        "diversity": True,
        "strategy_cosine": 0.9,
        "collapse_cosine": 0.95,
        "collapse_entropy": 0.05,
        "collapse_steps": 3,
    }
    (alarm,) = body["alarms"]  # the stub optimizer's paraphrases are near-copies of the seed: the cosine alarm
    assert alarm["reasons"] == ["cosine"] and alarm["step"] - alarm["since_step"] + 1 == 3
    judged = [
        (step, cosine)
        for step, cosine in zip(series["step"], series["cosine_min"], strict=True)
        if alarm["since_step"] <= step <= alarm["step"] and cosine is not None
    ]
    assert judged and all(cosine >= 0.95 for _, cosine in judged)


def test_a_collapsed_population_raises_one_alarm_that_the_api_lists_and_the_timeline_notes(alice, api, collapsed_run):
    body = diversity(api(alice), collapsed_run)
    (alarm,) = body["alarms"]
    assert (alarm["since_step"], alarm["step"]) == (0, 1) and "entropy" in alarm["reasons"]
    assert alarm["active"] and alarm["cleared_step"] is None and alarm["acknowledged_by"] is None
    assert alarm["collapse_entropy"] == 1.0 and body["collapsed"] == alarm
    assert RunNote.objects.filter(run=collapsed_run, kind="population_collapsed", step=1).exists()


def test_a_member_acknowledges_an_alarm_once_and_the_timeline_says_who(mia, api, collapsed_run):
    alarm = PopulationAlarm.objects.get(run=collapsed_run)
    response = acknowledge(api(mia), collapsed_run, alarm.pk)
    assert response.status_code == 200 and response.json()["acknowledged_by"] == "mia"
    first = response.json()["acknowledged_at"]
    again = acknowledge(api(mia), collapsed_run, alarm.pk)
    assert again.status_code == 200 and again.json()["acknowledged_at"] == first
    notes = RunNote.objects.filter(run=collapsed_run, kind="alarm_acknowledged")
    assert [n.payload for n in notes] == [{"alarm": alarm.pk, "by": "mia"}]
    assert diversity(api(mia), collapsed_run)["collapsed"]["acknowledged_by"] == "mia"


def test_viewers_read_but_do_not_acknowledge_and_other_teams_see_nothing(victor, bob, api, collapsed_run):
    alarm = PopulationAlarm.objects.get(run=collapsed_run)
    assert diversity(api(victor), collapsed_run)["alarms"][0]["id"] == alarm.pk
    refused = acknowledge(api(victor), collapsed_run, alarm.pk)
    assert refused.status_code == 403 and "detail" in refused.json()
    for response in (
        api(bob).get(f"/api/v1/runs/{collapsed_run.pk}/diversity/"),
        acknowledge(api(bob), collapsed_run, alarm.pk),
    ):
        assert response.status_code == 404 and "detail" in response.json()
    assert api(None).get(f"/api/v1/runs/{collapsed_run.pk}/diversity/").status_code in (401, 403)
    alarm.refresh_from_db()
    assert alarm.acknowledged_at is None


def test_an_alarm_of_another_run_or_none_at_all_is_a_404(alice, alice_team, api, collapsed_run):
    other = RunFactory(team=alice_team)
    alarm = PopulationAlarm.objects.get(run=collapsed_run)
    assert acknowledge(api(alice), other, alarm.pk).status_code == 404
    assert acknowledge(api(alice), collapsed_run, alarm.pk + 1000).status_code == 404
    assert api(alice).post(f"/api/v1/runs/{collapsed_run.pk}/alarms/x/acknowledge/").status_code == 404


def test_a_resumed_runs_rewind_forgets_diversity_and_alarms_after_its_checkpoint(collapsed_run):
    alarm = PopulationAlarm.objects.get(run=collapsed_run)
    PopulationAlarm.objects.filter(pk=alarm.pk).update(cleared_step=5)
    run_discard_after(run=collapsed_run, step=4)
    assert set(DiversityRecord.objects.filter(run=collapsed_run).values_list("step", flat=True)) <= set(range(5))
    alarm.refresh_from_db()
    assert alarm.cleared_step is None, "the recovery after step 4 is forgotten; the resumed steps say it again"
    run_discard_after(run=collapsed_run, step=0)
    assert not PopulationAlarm.objects.filter(run=collapsed_run).exists()


def test_a_run_that_does_not_measure_diversity_stores_none(alice, alice_team, api, gemini_url, worker_settings):
    run = train(alice, alice_team, **{"population.diversity": False})
    body = diversity(api(alice), run)
    assert body["series"]["step"] == [] and body["settings"]["diversity"] is False and body["collapsed"] is None
