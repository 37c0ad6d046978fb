"""Comparing runs: Fig. 2 series side by side, the paper's Table 1 (best per column), the config fields that
differ, deltas against a baseline — and the team wall: another team's run in the list is a 404. Table 1 of one run
(`/api/v1/runs/<id>/table/`): EM and F1 per benchmark from the per-question rows, and their unweighted average."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from tests.factories import CheckpointFactory, EvaluationFactory, RunFactory, StepMetricFactory
from webapp.runs import selectors
from webapp.runs.models import EvaluationAnswer, EvaluationRequest, Run, RunTag
from webapp.runs.outputs import ComparisonOutputSerializer

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
    empty_row = {"run_id": str(empty.pk), "values": {}, "average": None, "steps": {}, "n": {}}
    assert empty_row in body["benchmarks"]["rows"]


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


# -- Table 1 of one run, and the same numbers in the comparison -------------------------------------------------------


def answered(run, benchmark, em, f1, *, step=4, questions=None, **fields):
    """An evaluation that kept its per-question results: one row per (em, f1) pair, on `questions` (default q0, q1,
    …); its stored numbers are stale."""
    evaluation = EvaluationFactory(run=run, benchmark=benchmark, step=step, value=0.99, n=len(em), **fields)
    EvaluationFactory(run=run, benchmark=benchmark, step=step, metric="f1", value=0.99, n=len(em), **fields)
    ids = questions or [f"q{i}" for i in range(len(em))]
    EvaluationAnswer.objects.bulk_create(
        EvaluationAnswer(evaluation=evaluation, question_id=question, em=e, f1=f)
        for question, e, f in zip(ids, em, f1, strict=True)
    )
    return evaluation


@pytest.fixture
def evaluated(alice, alice_team):
    """A run evaluated at step 2 on nq, then at its end (step 4) on nq (4 questions) and hotpotqa (2 questions)."""
    run = RunFactory(team=alice_team, creator=alice, name="evaluated")
    answered(run, "nq", [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5], step=2)
    answered(run, "nq", [1.0, 0.0, 0.0, 0.0], [1.0, 0.5, 0.0, 0.5])
    answered(run, "hotpotqa", [1.0, 1.0], [1.0, 1.0])
    return run


def table(client, run, **params):
    return client.get(f"/api/v1/runs/{run.pk}/table/", params)


def test_a_runs_table_has_em_and_f1_per_benchmark_from_its_answers_and_their_unweighted_average(alice, api, evaluated):
    body = table(api(alice), evaluated).json()
    assert body["step"] is None and body["steps"] == [2, 4]
    cells = {cell["benchmark"]: cell for cell in body["benchmarks"]}
    assert list(cells) == ["hotpotqa", "nq"]
    assert cells["nq"] == {
        "benchmark": "nq", "step": 4, "em": 0.25, "f1": 0.5, "n": 4, "per_question": True, "source": "training",
        "excluded": None,  # nothing was asked to be left out (?exclude_overlap)
    }  # fmt: skip
    assert (cells["hotpotqa"]["em"], cells["hotpotqa"]["f1"], cells["hotpotqa"]["n"]) == (1.0, 1.0, 2)
    # Avg.: each benchmark weighs ½ — not the question-weighted (1 + 2) / 6 = 0.5
    assert body["average"] == {"em": pytest.approx(0.625), "f1": pytest.approx(0.75)}


def test_a_runs_table_at_an_earlier_step_shows_the_evaluations_of_that_step(alice, api, evaluated):
    body = table(api(alice), evaluated, step=2).json()
    assert body["step"] == 2 and [cell["benchmark"] for cell in body["benchmarks"]] == ["nq"]
    assert (body["benchmarks"][0]["em"], body["benchmarks"][0]["f1"]) == (0.0, 0.125)
    assert body["average"] == {"em": 0.0, "f1": 0.125}


def test_an_evaluation_without_answers_or_f1_shows_its_stored_number_and_no_f1_average(alice, alice_team, api):
    run = RunFactory(team=alice_team, creator=alice)
    EvaluationFactory(run=run, benchmark="nq", value=0.3)
    answered(run, "hotpotqa", [1.0, 0.0], [1.0, 0.0])
    cells = {cell["benchmark"]: cell for cell in table(api(alice), run).json()["benchmarks"]}
    assert cells["nq"] | {"benchmark": "-"} == {
        "benchmark": "-", "step": 4, "em": 0.3, "f1": None, "n": 4, "per_question": False, "source": "training",
        "excluded": None,
    }  # fmt: skip
    assert table(api(alice), run).json()["average"] == {"em": pytest.approx(0.4), "f1": None}


def test_a_requested_evaluation_after_the_final_one_at_an_earlier_step_does_not_replace_it(alice, api, evaluated):
    checkpoint = CheckpointFactory(run=evaluated, step=2)
    request = EvaluationRequest.objects.create(run=evaluated, checkpoint=checkpoint, benchmarks=["nq"])
    answered(evaluated, "nq", [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], step=2, request=request)
    final = {cell["benchmark"]: cell for cell in table(api(alice), evaluated).json()["benchmarks"]}
    assert final["nq"]["em"] == 0.25 and final["nq"]["source"] == "training"
    at_two = table(api(alice), evaluated, step=2).json()["benchmarks"][0]
    assert (at_two["em"], at_two["source"]) == (1.0, "requested")


@pytest.mark.parametrize("step", ["3", "-1", "two"])
def test_a_step_without_evaluations_or_no_step_at_all_is_a_400_naming_step(alice, api, evaluated, step):
    response = table(api(alice), evaluated, step=step)
    assert response.status_code == 400 and list(response.json()) == ["step"]


def test_another_teams_run_table_is_a_404_and_anonymous_is_refused(bob, victor, api, evaluated):
    assert table(api(bob), evaluated).status_code == 404
    assert table(api(bob), evaluated, step=3).status_code == 404  # no hint that the run exists
    assert table(api(None), evaluated).status_code == 401
    assert table(api(victor), evaluated).status_code == 200


def test_the_comparison_takes_the_same_numbers_with_the_step_and_questions_of_each(alice, api, evaluated, static):
    body = compare(api(alice), evaluated, static, metric="f1").json()["benchmarks"]
    row = next(row for row in body["rows"] if row["run_id"] == str(evaluated.pk))
    assert row["values"] == {"nq": 0.5, "hotpotqa": 1.0} and row["average"] == pytest.approx(0.75)
    assert row["steps"] == {"nq": 4, "hotpotqa": 4} and row["n"] == {"nq": 4, "hotpotqa": 2}


def test_a_run_without_a_value_in_every_column_has_no_average_to_rank(alice, alice_team, api, static):
    partial = RunFactory(team=alice_team, creator=alice)
    EvaluationFactory(run=partial, benchmark="nq", value=0.9)
    body = compare(api(alice), static, partial).json()["benchmarks"]
    rows = {row["run_id"]: row for row in body["rows"]}
    assert rows[str(partial.pk)]["values"] == {"nq": 0.9} and rows[str(partial.pk)]["average"] is None
    assert rows[str(static.pk)]["average"] == pytest.approx(0.25)
    assert "average" not in body["best"] and body["best"]["nq"] == [str(partial.pk)]


# -- what a comparison compares: each cell's questions, columns on different questions, deltas on shared ones ---------


def test_a_column_scored_on_different_questions_is_marked_and_its_delta_is_over_the_questions_both_scored(
    alice, alice_team, api
):
    base, other = (RunFactory(team=alice_team, creator=alice, name=name) for name in ("base", "other"))
    # nq: base scored q0-q3 (mean 0.5), other q2-q5 (mean 0.75); on q2 and q3, both scored, base 0.5 and other 1.0.
    answered(base, "nq", [1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0])
    answered(other, "nq", [1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], questions=["q2", "q3", "q4", "q5"])
    # hotpotqa: the same two questions.
    answered(base, "hotpotqa", [1.0, 0.0], [1.0, 0.0])
    answered(other, "hotpotqa", [1.0, 1.0], [1.0, 1.0])
    body = compare(api(alice), base, other, baseline=str(base.pk)).json()
    table = body["benchmarks"]
    assert table["questions"] == {"hotpotqa": "same", "nq": "different"}
    rows = {row["run_id"]: row for row in table["rows"]}
    assert rows[str(other.pk)]["n"] == {"nq": 4, "hotpotqa": 2}
    assert rows[str(other.pk)]["values"]["nq"] == 0.75  # the cell keeps its own value, on its own questions
    deltas, over = body["deltas"][str(other.pk)], body["delta_questions"][str(other.pk)]
    assert deltas["nq"] == pytest.approx(0.5) and over["nq"] == 2  # not 0.75 - 0.5: q2 and q3 only
    assert deltas["hotpotqa"] == pytest.approx(0.5) and over["hotpotqa"] == 2
    assert deltas["average"] == pytest.approx(0.5)  # the mean of the columns' paired deltas


def test_runs_without_a_question_in_common_or_with_unrecorded_questions_of_other_counts_get_no_delta(
    alice, alice_team, api
):
    base, other = (RunFactory(team=alice_team, creator=alice) for _ in range(2))
    answered(base, "nq", [1.0], [1.0])
    answered(other, "nq", [0.0], [0.0], questions=["elsewhere"])
    EvaluationFactory(run=base, benchmark="popqa", value=0.3, n=32)  # kept no per-question results
    EvaluationFactory(run=other, benchmark="popqa", value=0.4, n=20)
    EvaluationFactory(run=base, benchmark="triviaqa", value=0.3, n=20)
    EvaluationFactory(run=other, benchmark="triviaqa", value=0.4, n=20)
    body = compare(api(alice), base, other, baseline=str(base.pk)).json()
    assert body["benchmarks"]["questions"] == {"nq": "different", "popqa": "different", "triviaqa": "unrecorded"}
    assert body["deltas"][str(other.pk)] == {"triviaqa": pytest.approx(0.1)}  # and so no average either
    assert body["delta_questions"][str(other.pk)] == {"triviaqa": None}


def test_a_settled_comparison_is_cached_until_a_run_is_evaluated_again_renamed_or_tagged(alice, alice_team, api):
    runs = [RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED) for _ in range(2)]
    for run in runs:
        EvaluationFactory(run=run, benchmark="nq", value=0.2)
    client = api(alice)
    key = selectors.comparison_cache_key(runs=runs, metric="em", baseline=runs[0])
    assert key is not None and compare(client, *runs, baseline=str(runs[0].pk)).status_code == 200
    assert cache.get(key) is not None
    EvaluationFactory(run=runs[1], benchmark="nq", step=5, value=0.9)
    assert selectors.comparison_cache_key(runs=runs, metric="em", baseline=runs[0]) != key
    body = compare(client, *runs, baseline=str(runs[0].pk)).json()
    assert body["benchmarks"]["rows"][1]["values"] == {"nq": 0.9}
    runs[1].name = "renamed"
    runs[1].save()
    RunTag.objects.create(run=runs[0], name="kept")
    body = compare(client, *runs).json()
    assert [run["name"] for run in body["runs"]][1] == "renamed" and body["runs"][0]["tags"] == ["kept"]
    runs[1].status = Run.Status.RUNNING
    runs[1].save()
    assert selectors.comparison_cache_key(runs=runs, metric="em", baseline=None) is None


def test_a_settled_run_compared_again_with_other_runs_reads_none_of_its_answers(alice, alice_team, api):
    runs = [RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED) for _ in range(3)]
    for run, ems in zip(runs, ([1, 0], [1, 1], [0, 0]), strict=True):
        evaluation = EvaluationFactory(run=run, benchmark="nq", value=0.5, n=2)
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=em, f1=em) for i, em in enumerate(ems)
        )
    client = api(alice)
    assert compare(client, runs[0], runs[1]).status_code == 200 and compare(client, runs[2]).status_code == 200
    with CaptureQueriesContext(connection) as queries:  # a comparison not made before, of runs compared before
        body = compare(client, runs[2], runs[0], runs[1], baseline=str(runs[2].pk)).json()
    assert not [q["sql"] for q in queries if "runs_evaluationanswer" in q["sql"]]
    assert [row["values"] for row in body["benchmarks"]["rows"]] == [{"nq": 0.0}, {"nq": 0.5}, {"nq": 1.0}]
    assert body["deltas"][str(runs[1].pk)] == {"nq": 1.0, "average": 1.0}
    assert body["benchmarks"]["questions"] == {"nq": "same"}
    cache.clear()
    assert compare(client, runs[2], runs[0], runs[1], baseline=str(runs[2].pk)).json() == body  # as computed afresh


def test_an_unchanged_comparison_polled_with_its_etag_is_a_304_without_a_body(alice, alice_team, api):
    settled = [RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED) for _ in range(2)]
    live = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING)
    client = api(alice)
    for runs in (settled, [settled[0], live]):
        first = compare(client, *runs)
        etag = first["ETag"]
        again = client.get("/api/v1/compare/", {"runs": [str(r.pk) for r in runs]}, HTTP_IF_NONE_MATCH=etag)
        assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    StepMetricFactory(run=live, step=1)  # a live run's new step changes its answer and so its ETag
    again = client.get("/api/v1/compare/", {"runs": [str(settled[0].pk), str(live.pk)]}, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 200 and again["ETag"] != etag


def test_the_output_serializer_reproduces_the_comparison_the_view_sends(alice, alice_team, api, static, online):
    base, other = static, online
    answered(base, "popqa", [1.0, 0.0], [1.0, 0.5])
    answered(other, "popqa", [1.0], [1.0])
    comparison = selectors.run_compare(runs=[base, other], metric="f1", baseline=base)
    render = JSONRenderer().render
    assert render(ComparisonOutputSerializer(comparison).data) == render(comparison)
    assert comparison["delta_questions"][str(other.pk)]["popqa"] == 1
