"""Evaluates a stored checkpoint on chosen benchmarks (EM and F1 per benchmark) and stores the results.

It rebuilds the policy from the checkpoint's Hugging Face directory and takes the checkpoint's best instruction
from the population saved beside it. A watchdog beats the request's heartbeat, so the sweep fails a request whose
worker died; a worker that lost the request stores nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from inspo_engine.build import checkpoint_policy
from inspo_engine.checkpoints import POLICY_DIR
from inspo_engine.config import RunConfig
from inspo_engine.evaluate import Answerer, checkpoint_best, evaluate_checkpoint
from webapp.runs import lifecycle
from webapp.runs.endpoints import net_policy
from webapp.runs.models import Evaluation, EvaluationRequest
from webapp.runs.selectors import BENCHMARK_METRICS, evaluation_request_for_worker, instruction_by_key

from .inputs import local_benchmarks, stored_config
from .liveness import Watchdog

log = logging.getLogger(__name__)

AnswererFactory = Callable[[RunConfig, Path], Answerer]


def torch_answerer(config: RunConfig, policy_dir: Path) -> Answerer:
    return checkpoint_policy(
        config,
        policy_dir,
        Path(settings.INSPO_CACHE_DIR),
        retriever_policy=net_policy(),
        retrieval_service=settings.INSPO_RETRIEVAL_URL or None,
    )


def evaluation_execute(*, request_id: int, worker: str = "", answerer: AnswererFactory | None = None) -> str:
    """Run a queued evaluation request once; a second delivery does nothing ('skipped'), and a worker that lost
    the request meanwhile (failed as lost) stores nothing ('superseded')."""
    claim = lifecycle.evaluation_claim(request_id=request_id, worker=worker)
    if claim is None:
        return "skipped"
    request = evaluation_request_for_worker(request_id=request_id)
    watchdog = Watchdog(
        claim, heartbeat_s=settings.INSPO_HEARTBEAT_S, grace_s=settings.INSPO_SHUTDOWN_GRACE_S, stage="evaluate"
    )
    try:
        with watchdog.watching():
            rows = _evaluate(request, answerer or torch_answerer)
    except BaseException as error:
        claim.give_up(f"{type(error).__name__}: {error}")
        raise
    return "finished" if lifecycle.evaluation_finish(claim, rows) else "superseded"


def _evaluate(request: EvaluationRequest, make: AnswererFactory) -> list[Evaluation]:
    config, _ = stored_config(request.run)
    benchmarks, names = local_benchmarks(request.run, list(request.benchmarks))
    checkpoint_dir = Path(request.checkpoint.path)
    best = checkpoint_best(checkpoint_dir, config)
    instruction = instruction_by_key(run=request.run, key=best.id)
    policy = make(config, checkpoint_dir / POLICY_DIR)
    rows: list[Evaluation] = []
    for result in evaluate_checkpoint(policy, best.text, benchmarks, limit=request.limit):
        rows += [
            Evaluation(
                run=request.run,
                step=request.checkpoint.step,
                benchmark=names.get(result.benchmark, result.benchmark)[:200],
                metric=metric,
                value=value,
                n=len(result.trajectories),
                instruction=instruction,
                checkpoint=request.checkpoint,
                request=request,
            )
            for metric, value in result.scores.items()
            if metric in BENCHMARK_METRICS  # what the dashboards compare; the scores also hold answer and format rates
        ]
    return rows
