"""Comparing runs: Fig. 2 series side by side, the paper's Table 1 (best per column), the config fields that
differ, deltas against a baseline — and the team wall: another team's run in the list is a 404."""

from __future__ import annotations

import pytest

from tests.factories import EvaluationFactory, RunFactory, StepMetricFactory
from webapp.runs import selectors

pytestmark = pytest.mark.django_db


@pytest.fixture
def static(alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, name="static")
    run.config["mode"] = "static"
    run.save()
    for step, reward in [(1, 0.1), (2, 0.2)]:
        StepMetricFactory(run=run, step=step, reward_mean=reward)
    EvaluationFactory(run=run, benchmark="nq", value=0.30)
    EvaluationFactory(run=run, benchmark="hotpotqa", value=0.20)
    return run


@pytest.fixture
def online(alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, name="online")
    StepMetricFactory(run=run, step=1, reward_mean=0.3)
    EvaluationFactory(run=run, benchmark="nq", step=2, value=0.10)
    EvaluationFactory(run=run, benchmark="nq", step=4, value=0.40)  # the newest value counts
    EvaluationFactory(run=run, benchmark="hotpotqa", value=0.15)
    EvaluationFactory(run=run, benchmark="hotpotqa", metric="f1", value=0.9)
    return run


def compare(client, *runs, **params):
    return client.get("/api/v1/compare/", {"runs": [str(r.pk) for r in runs], **params})


def test_series_table_best_and_deltas(alice, api, static, online):
    body = compare(api(alice), static, online, baseline=str(static.pk)).json()
    assert [r["name"] for r in body["runs"]] == ["static", "online"]
    assert body["series"][str(static.pk)]["step"] == [1, 2]
    assert body["series"][str(static.pk)]["reward_mean"] == [0.1, 0.2]
    assert body["series"][str(online.pk)]["reward_mean"] == [0.3]
    table = body["benchmarks"]
    assert table["metric"] == "em" and table["columns"] == ["hotpotqa", "nq"]
    rows = {row["run_id"]: row for row in table["rows"]}
    assert rows[str(online.pk)]["values"] == {"nq": 0.40, "hotpotqa": 0.15}
    assert rows[str(static.pk)]["average"] == pytest.approx(0.25)
    assert rows[str(online.pk)]["average"] == pytest.approx(0.275)
    assert table["best"] == {"nq": [str(online.pk)], "hotpotqa": [str(static.pk)], "average": [str(online.pk)]}
    assert body["baseline"] == str(static.pk)
    deltas = body["deltas"][str(online.pk)]
    assert deltas["nq"] == pytest.approx(0.10) and deltas["hotpotqa"] == pytest.approx(-0.05)
    assert deltas["average"] == pytest.approx(0.025)
    assert str(static.pk) not in body["deltas"]


def test_ties_star_every_run_with_the_top_value_and_a_tie_across_the_board_stars_none(alice, alice_team, api):
    runs = [RunFactory(team=alice_team, creator=alice, name=name) for name in ("a", "b", "c")]
    for run, nq, hotpotqa in zip(runs, (0.0, 0.0, 0.0), (0.5, 0.5, 0.25), strict=True):
        EvaluationFactory(run=run, benchmark="nq", value=nq)
        EvaluationFactory(run=run, benchmark="hotpotqa", value=hotpotqa)
    best = compare(api(alice), *runs).json()["benchmarks"]["best"]
    a, b, _ = (str(run.pk) for run in runs)
    assert best == {"hotpotqa": [a, b], "average": [a, b]}  # nq: all 0.000, no star


def test_config_diff_shows_only_fields_that_differ(alice, api, static, online):
    diff = compare(api(alice), static, online).json()["config_diff"]
    assert diff == [{"field": "mode", "values": {str(static.pk): "static", str(online.pk): online.config["mode"]}}]


def test_metric_choice_and_comma_separated_ids(alice, api, static, online):
    client = api(alice)
    response = client.get("/api/v1/compare/", {"runs": f"{static.pk},{online.pk}", "metric": "f1"})
    table = response.json()["benchmarks"]
    assert table["columns"] == ["hotpotqa"] and table["best"] == {}  # one run has f1: nothing to be better than
    assert response.json()["deltas"] == {}


def test_an_unknown_metric_is_refused_naming_the_metrics_there_are(alice, api, static, online):
    response = compare(api(alice), static, online, metric="zz")
    assert response.status_code == 400
    assert response.json() == {"metric": ["unknown metric 'zz'; choose one of em, f1"]}


def test_a_parameter_that_takes_one_value_given_twice_is_refused(alice, api, static, online):
    response = api(alice).get(f"/api/v1/compare/?runs={static.pk}&runs={online.pk}&metric=em&metric=f1")
    assert response.status_code == 400 and response.json() == {"metric": ["give this parameter once"]}


def test_config_diff_compares_values_by_content_in_any_key_order():
    configs = {"x": {"o": [{"a": 1, "b": 2}], "l": [1, 2]}, "y": {"o": [{"b": 2, "a": 1}], "l": [2, 1]}}
    assert selectors.config_diff(configs) == [{"field": "l", "values": {"x": [1, 2], "y": [2, 1]}}]
    assert selectors.config_diff({"x": {"a": 1}, "y": {"a": 1, "b": {"c": 2}}}) == [
        {"field": "b.c", "values": {"x": None, "y": 2}}
    ]


def test_a_run_without_steps_or_evaluations_compares_empty(alice, alice_team, api, static):
    empty = RunFactory(team=alice_team, creator=alice)
    body = compare(api(alice), static, empty).json()
    assert body["series"][str(empty.pk)] == {
        "step": [],
        "reward_mean": [],
        "tool_calls_mean": [],
        "response_length_mean": [],
        "instruction_length_mean": [],
    }
    assert {"run_id": str(empty.pk), "values": {}, "average": None} in body["benchmarks"]["rows"]


def test_bad_input_names_the_field(alice, api, static, online):
    client = api(alice)
    assert "runs" in client.get("/api/v1/compare/").json()
    assert "runs" in client.get("/api/v1/compare/", {"runs": "not-a-uuid"}).json()
    outside = compare(client, static, baseline=str(online.pk))
    assert outside.status_code == 400 and "baseline" in outside.json()
    too_many = client.get("/api/v1/compare/", {"runs": [str(static.pk)] * 13})
    assert too_many.status_code == 400 and "runs" in too_many.json()


def test_another_teams_run_is_a_404_and_anonymous_is_refused(alice, bob, bob_team, victor, api, static):
    theirs = RunFactory(team=bob_team, creator=bob)
    assert compare(api(alice), static, theirs).status_code == 404
    assert compare(api(bob), static).status_code == 404
    assert compare(api(None), static).status_code == 401
    assert compare(api(victor), static).status_code == 200


def test_run_list_filters_by_preset_and_sorts(alice, alice_team, api):
    for name, preset, step in [("b", "smoke", 3), ("a", "cpu-demo", 1), ("c", "smoke", 2)]:
        RunFactory(team=alice_team, creator=alice, name=name, preset=preset, step=step)
    client = api(alice)
    names = [r["name"] for r in client.get("/api/v1/runs/", {"preset": "smoke", "ordering": "name"}).json()["results"]]
    assert names == ["b", "c"]
    by_step = [r["name"] for r in client.get("/api/v1/runs/", {"ordering": "-step"}).json()["results"]]
    assert by_step == ["b", "c", "a"]
    assert "ordering" in client.get("/api/v1/runs/", {"ordering": "secret_field"}).json()


def test_ping_needs_a_user(alice, api):
    assert api(alice).get("/api/v1/ping/").json() == {"ok": True}
    assert api(None).get("/api/v1/ping/").status_code == 401
