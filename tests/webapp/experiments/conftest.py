"""Experiments for the API and page tests: a 2-arm × 2-seed smoke experiment of alice's team, and a way to give one
of its runs the results a finished run leaves (per-question answers and step rewards)."""

from __future__ import annotations

from typing import Any

import pytest

QUESTIONS = [f"q{i}" for i in range(8)]


def spec(**changes: Any) -> dict[str, Any]:
    """A small experiment as the API takes it."""
    return {"preset": "smoke", "arms": ["static", "inspo"], "seeds": 2, **changes}


def finish(
    run: Any,
    *,
    correct: int | dict[str, int],
    rewards: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4),
    questions: int = len(QUESTIONS),
) -> Any:
    """Mark the run finished with its final evaluation: the first `correct` of `questions` right, the rest wrong —
    on builtin, or on each benchmark of `correct` (benchmark as the run's config stores it → how many right)."""
    from django.utils import timezone

    from tests.factories import StepMetricFactory
    from webapp.runs.models import Evaluation, EvaluationAnswer, Run

    for step, reward in enumerate(rewards, start=1):
        StepMetricFactory(run=run, step=step, reward_mean=reward)
    for benchmark, right in (correct if isinstance(correct, dict) else {"builtin": correct}).items():
        evaluation = Evaluation.objects.create(
            run=run, step=len(rewards), benchmark=benchmark, metric="em", value=0.0, n=questions
        )
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=float(i < right), f1=float(i < right))
            for i in range(questions)
        )
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FINISHED, step=len(rewards), finished_at=timezone.now())
    run.refresh_from_db()
    return run


@pytest.fixture
def experiment(alice: Any, alice_team: Any) -> Any:
    from webapp.experiments.services import experiment_submit

    return experiment_submit(team=alice_team, user=alice, name="two arms", spec=spec())


@pytest.fixture
def committed(django_capture_on_commit_callbacks: Any) -> Any:
    """`with committed(execute=True): …` runs what the block enqueued on commit as it ends (the test's transaction
    never commits)."""
    return django_capture_on_commit_callbacks


@pytest.fixture
def nq_file(alice_team: Any, settings: Any, tmp_path: Any) -> Any:
    """nq.jsonl in alice's team's data directory (a benchmark a submission names must be there)."""
    from webapp.runs.configs import team_data_dir

    settings.INSPO_DATA_DIR = tmp_path / "data"
    path = team_data_dir(alice_team) / "nq.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    return path
