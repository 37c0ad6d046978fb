"""The recorder keeps every evaluation's per-question results — question id, EM, F1, answer — as EvaluationAnswer
rows, and the benchmark table (Table 1) computes its numbers from those rows when they are there."""

from __future__ import annotations

import time

import pytest

from inspo_engine.events import EvalCompleted
from tests.factories import EvaluationFactory, RunFactory
from webapp.runs.models import Evaluation, EvaluationAnswer
from webapp.runs.recorder import DatabaseSink
from webapp.runs.selectors import benchmark_table

pytestmark = pytest.mark.django_db

ANSWERS = [
    {"question_id": "q1", "em": 1.0, "f1": 1.0, "answer": "Paris"},
    {"question_id": "q2", "em": 0.0, "f1": 0.5, "answer": "Lyon\x00 city"},
    {"question_id": "q3", "em": 0.0, "f1": float("nan"), "answer": None},
    {"question_id": "q1", "em": 0.0, "f1": 0.0, "answer": "again"},
]


def evaluation_event(**changes):
    fields = {"time": time.time(), "step": 4, "benchmark": "builtin", "metric": "em", "value": 1 / 3, "n": 3}
    return EvalCompleted(**{**fields, "instruction_id": "ins-0000", "f1": 0.5, "answers": ANSWERS, **changes})


def test_an_evaluation_keeps_one_row_per_question_with_em_f1_and_the_answer(alice_team):
    run = RunFactory(team=alice_team)
    sink = DatabaseSink(run.pk)
    sink.emit(evaluation_event())
    sink.flush()
    em = Evaluation.objects.get(run=run, metric="em")
    rows = list(EvaluationAnswer.objects.filter(evaluation=em).values_list("question_id", "em", "f1", "answer"))
    assert rows == [("q1", 1.0, 1.0, "Paris"), ("q2", 0.0, 0.5, "Lyon city"), ("q3", 0.0, 0.0, "")]
    assert Evaluation.objects.get(run=run, metric="f1").value == 0.5


def test_an_evaluation_without_answers_stores_its_number_alone(alice_team):
    run = RunFactory(team=alice_team)
    sink = DatabaseSink(run.pk)
    sink.emit(evaluation_event(answers=[], f1=None))
    sink.flush()
    assert Evaluation.objects.filter(run=run).count() == 1 and not EvaluationAnswer.objects.exists()


def test_table_one_takes_its_numbers_from_the_per_question_rows(alice_team):
    stored, plain = RunFactory(team=alice_team), RunFactory(team=alice_team)
    evaluation = EvaluationFactory(run=stored, value=0.9)  # a stale number: the rows say otherwise
    EvaluationAnswer.objects.bulk_create(
        EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=float(i < 1), f1=0.0) for i in range(4)
    )
    EvaluationFactory(run=plain, value=0.4)
    table = benchmark_table([stored, plain], metric="em")
    values = {row["run_id"]: row["values"]["builtin"] for row in table["rows"]}
    assert values == {str(stored.pk): 0.25, str(plain.pk): 0.4}


@pytest.mark.django_db(transaction=True)
def test_a_trained_run_stores_its_final_evaluations_answers(scripted_run):
    evaluation = Evaluation.objects.filter(run=scripted_run, metric="em").order_by("-step").first()
    assert evaluation is not None
    answers = EvaluationAnswer.objects.filter(evaluation=evaluation)
    assert answers.count() == evaluation.n > 0
    assert sum(answers.values_list("em", flat=True)) / evaluation.n == pytest.approx(evaluation.value)
