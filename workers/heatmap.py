"""Evaluates a heatmap: each chosen instruction answers the same sample of a benchmark's test split greedily with
each chosen checkpoint's policy, and every cell is stored as soon as it is scored (the page shows the heatmap fill
in; a failure keeps the cells already scored).

The engine's `evaluate_grid` does the evaluating; this module draws the sample, loads each checkpoint's
`policy/` through the same factory as checkpoint evaluations, and hands each cell to `lifecycle`. A watchdog beats
the heatmap's heartbeat, so the sweep fails one whose worker died; a worker that lost the heatmap stores nothing.
A shutdown request stops it between two cells.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from inspo_engine import events as ev
from inspo_engine.checkpoints import POLICY_DIR
from inspo_engine.env.datasets import load_questions, sample_questions
from inspo_engine.env.rewards import exact_match, f1
from inspo_engine.evaluate import Answerer, CellResult, evaluate_grid
from webapp.runs import lifecycle
from webapp.runs.models import Heatmap, HeatmapCell
from webapp.runs.selectors import heatmap_cells_for_worker, heatmap_for_worker, run_directory

from .evaluation import AnswererFactory, torch_answerer
from .inputs import local_benchmarks, stored_config
from .liveness import Watchdog, shutdown_requested_at

log = logging.getLogger(__name__)


class CheckpointGone(RuntimeError):
    """A checkpoint the heatmap names is no longer on disk (the run's keep_last deleted it)."""


def heatmap_execute(*, heatmap_id: int, worker: str = "", answerer: AnswererFactory | None = None) -> str:
    """Evaluate a queued heatmap once: 'finished'; 'skipped' on a second delivery; 'superseded' when the worker
    lost it meanwhile (failed as lost), and then it stores nothing more; 'stopped' when a shutdown stopped it
    between two cells (failed, its scored cells kept)."""
    claim = lifecycle.heatmap_claim(heatmap_id=heatmap_id, worker=worker)
    if claim is None:
        return "skipped"
    heatmap = heatmap_for_worker(heatmap_id=heatmap_id)
    watchdog = Watchdog(
        claim, heartbeat_s=settings.INSPO_HEARTBEAT_S, grace_s=settings.INSPO_SHUTDOWN_GRACE_S, stage="heatmap"
    )
    try:
        with watchdog.watching():
            return _evaluate(claim, heatmap, answerer or torch_answerer, watchdog)
    except BaseException as error:
        claim.give_up(f"{type(error).__name__}: {error}")
        raise


def _evaluate(claim: lifecycle.HeatmapClaim, heatmap: Heatmap, make: AnswererFactory, watchdog: Watchdog) -> str:
    config, _ = stored_config(heatmap.run)
    [benchmark], _ = local_benchmarks(heatmap.run, [heatmap.benchmark], field="benchmark")
    questions = sample_questions(load_questions(benchmark, "test"), heatmap.sample_size, seed=heatmap.sample_seed)
    if not questions:
        raise ValueError(f"{heatmap.benchmark}: no test questions to answer")
    if not lifecycle.heatmap_sample(claim, [q.id for q in questions]):
        return "superseded"
    cells = heatmap_cells_for_worker(heatmap=heatmap)
    pairs = {(cell.instruction.key, cell.checkpoint.step): cell for cell in cells}
    instructions = {cell.instruction.key: cell.instruction.text for cell in sorted(cells, key=lambda c: c.row)}
    policies = {cell.checkpoint.step: _policy_dir(heatmap, cell) for cell in cells}
    steps = {directory: step for step, directory in policies.items()}

    def load(policy_dir: Path) -> Answerer:
        if not policy_dir.is_dir():
            raise CheckpointGone(
                f"the checkpoint of step {steps[policy_dir]} is no longer on disk (the run's keep_last deleted it); "
                "the cells scored before it are kept"
            )
        return make(config, policy_dir)

    done = {pair for pair, cell in pairs.items() if cell.finished_at is not None}
    for count, result in enumerate(evaluate_grid(load, policies, instructions, questions, skip=done), len(done) + 1):
        cell = pairs[(result.instruction_id, result.step)]
        answers = _answers(result)
        if not lifecycle.heatmap_cell_store(claim, cell_id=cell.pk, scores=result.scores, trajectories=answers):
            return "superseded"
        watchdog.emit(ev.StageStarted(step=result.step, stage=f"heatmap, {count} of {len(cells)} cells"))
        if shutdown_requested_at() is not None and count < len(cells):
            stopped = f"the worker {claim.worker} shut down after {count} of {len(cells)} cells; they are kept"
            return "stopped" if claim.give_up(stopped) else "superseded"
    return "finished" if lifecycle.heatmap_finish(claim) else "superseded"


def _policy_dir(heatmap: Heatmap, cell: HeatmapCell) -> Path:
    """The checkpoint's `policy/`, which must lie in the run's own directory (the worker reads nothing else)."""
    directory = Path(cell.checkpoint.path) / POLICY_DIR
    root = run_directory(run_id=heatmap.run_id).resolve()
    if not directory.resolve().is_relative_to(root):
        raise CheckpointGone(f"the checkpoint of step {cell.checkpoint.step} is not in the run's directory")
    return directory


def _answers(result: CellResult) -> list[dict[str, object]]:
    """Each answer as stored: the trajectory (under its cell's instruction id), and its own EM and F1."""
    return [
        {
            **trajectory.to_dict(),
            "instruction_id": result.instruction_id,
            "em": exact_match(trajectory.answer, trajectory.question.golden_answers),
            "f1": f1(trajectory.answer, trajectory.question.golden_answers),
        }
        for trajectory in result.trajectories
    ]
