"""Evaluates a stored checkpoint on chosen benchmarks (EM and F1 per benchmark) and stores the results.

It rebuilds the policy from the checkpoint's Hugging Face directory and takes the checkpoint's best instruction
from the population saved beside it.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inspo_engine.coevolution import POLICY_DIR, STATE_FILE
from inspo_engine.config import RunConfig
from inspo_engine.population import Population
from inspo_engine.types import Question, Trajectory
from webapp.runs.models import Evaluation, EvaluationRequest, Instruction

log = logging.getLogger(__name__)


class Answerer(Protocol):
    """What evaluation needs of a policy: one greedy answer per question, its reward being EM."""

    def answer(self, instruction: str, questions: Sequence[Question]) -> list[Trajectory]: ...


AnswererFactory = Callable[[RunConfig, Path], Answerer]


def torch_answerer(config: RunConfig, policy_dir: Path) -> Answerer:
    from inspo_engine.backends.torch.backend import TorchBackend
    from inspo_engine.build import make_retriever
    from inspo_engine.env.datasets import load_corpus

    cache_dir = Path(settings.INSPO_CACHE_DIR)
    corpus = None if config.env.retriever == "remote" else load_corpus(config.env.corpus)
    retriever = make_retriever(config, corpus, cache_dir)
    return TorchBackend(config, retriever=retriever, cache_dir=cache_dir / "models", model_path=policy_dir)


def checkpoint_best_instruction(checkpoint_dir: Path, config: RunConfig) -> tuple[str, str]:
    """(engine id, text) of the best instruction in the population saved with the checkpoint."""
    state = json.loads((checkpoint_dir / STATE_FILE).read_text(encoding="utf-8"))
    population = Population(
        max_size=64,
        n_parents=1,
        temperature=config.population.temperature,
        weight_window=config.population.weight_window,
    )
    population.load_state(state["population"])
    best = population.best()
    return best.id, best.text


def evaluation_execute(*, request_id: int, answerer: AnswererFactory | None = None) -> str:
    """Run a queued evaluation request once; a second delivery does nothing."""
    claimed = EvaluationRequest.objects.filter(pk=request_id, status=EvaluationRequest.Status.QUEUED).update(
        status=EvaluationRequest.Status.RUNNING
    )
    if not claimed:
        return "skipped"
    request = EvaluationRequest.objects.select_related("run", "checkpoint").get(pk=request_id)
    try:
        rows = _evaluate(request, answerer or torch_answerer)
    except BaseException as error:
        EvaluationRequest.objects.filter(pk=request_id).update(
            status=EvaluationRequest.Status.FAILED,
            error=f"{type(error).__name__}: {error}"[:10_000],
            finished_at=timezone.now(),
        )
        raise
    with transaction.atomic():
        Evaluation.objects.bulk_create(rows)
        EvaluationRequest.objects.filter(pk=request_id).update(
            status=EvaluationRequest.Status.FINISHED, finished_at=timezone.now()
        )
    return "finished"


def _evaluate(request: EvaluationRequest, make: AnswererFactory) -> list[Evaluation]:
    from inspo_engine.env.datasets import load_questions
    from inspo_engine.env.rewards import f1

    config = RunConfig.from_dict(request.run.config)
    checkpoint_dir = Path(request.checkpoint.path)
    key, text = checkpoint_best_instruction(checkpoint_dir, config)
    instruction = Instruction.objects.filter(run=request.run, key=key).first()
    policy = make(config, checkpoint_dir / POLICY_DIR)
    rows: list[Evaluation] = []
    for benchmark in request.benchmarks:
        trajectories = policy.answer(text, load_questions(benchmark, "test", limit=request.limit))
        scores: dict[str, Any] = {
            "em": statistics.fmean(t.reward for t in trajectories) if trajectories else 0.0,
            "f1": statistics.fmean(f1(t.answer, t.question.golden_answers) for t in trajectories)
            if trajectories
            else 0.0,
        }
        rows += [
            Evaluation(
                run=request.run,
                step=request.checkpoint.step,
                benchmark=benchmark[:200],
                metric=metric,
                value=value,
                n=len(trajectories),
                instruction=instruction,
                checkpoint=request.checkpoint,
                request=request,
            )
            for metric, value in scores.items()
        ]
    return rows
