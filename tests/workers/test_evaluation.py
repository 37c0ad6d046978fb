"""Evaluating a stored checkpoint: the checkpoint's best instruction answers each benchmark; EM and F1 are
stored per benchmark; the request ends finished (or failed with the reason) and runs only once."""

from __future__ import annotations

import pytest

from inspo_engine.types import Trajectory
from webapp.runs import services
from webapp.runs.configs import team_data_dir
from webapp.runs.models import Evaluation, EvaluationRequest
from workers.evaluation import evaluation_execute

pytestmark = pytest.mark.django_db


class Answers:
    """A policy that gets the first question of every batch right and the rest wrong."""

    def __init__(self, config, policy_dir):
        assert (policy_dir / "scripted.json").exists()
        self.instructions = []

    def answer(self, instruction, questions):
        self.instructions.append(instruction)
        out = []
        for i, q in enumerate(questions):
            answer = q.golden_answers[0] if i == 0 else "no idea"
            out.append(Trajectory("eval", q, f"<answer> {answer} </answer>", float(i == 0), answer))
        return out


def test_evaluate_stores_em_and_f1_per_benchmark_once(scripted_run, alice):
    request = services.run_evaluate(run=scripted_run, user=alice, benchmarks=["builtin"], limit=4)
    assert evaluation_execute(request_id=request.pk, answerer=Answers) == "finished"
    assert evaluation_execute(request_id=request.pk, answerer=Answers) == "skipped"
    request.refresh_from_db()
    assert request.status == EvaluationRequest.Status.FINISHED
    rows = {e.metric: e for e in Evaluation.objects.filter(request=request)}
    assert set(rows) == {"em", "f1"} and rows["em"].value == 0.25 and rows["em"].n == 4
    assert rows["em"].checkpoint == request.checkpoint and rows["em"].step == 6
    assert rows["em"].instruction is not None


def test_a_failing_evaluation_records_the_reason(scripted_run, alice):
    """A benchmark file removed after the request was accepted (one missing then is refused at once)."""
    benchmark = team_data_dir(scripted_run.team) / "no-such-benchmark.jsonl"
    benchmark.parent.mkdir(parents=True, exist_ok=True)
    benchmark.write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    request = services.run_evaluate(run=scripted_run, user=alice, benchmarks=["no-such-benchmark.jsonl"])
    benchmark.unlink()
    with pytest.raises(Exception):  # noqa: B017  (whatever the dataset loader raises)
        evaluation_execute(request_id=request.pk, answerer=Answers)
    request.refresh_from_db()
    assert request.status == EvaluationRequest.Status.FAILED and "no-such-benchmark.jsonl" in request.error
