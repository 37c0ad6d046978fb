"""Where a run stands, in words and numbers: its phase (waiting, evaluating the untrained policy, training step k,
evaluating step k), the share of its work done and the time left, its evaluations counted beside its steps. Read
from the run's row (step, status, `evaluation_progress`, which the recorder keeps from the engine's EvalProgress
events) and its steps' timings; it writes nothing.

The time left is the steps still to train at the mean duration of the steps so far, plus the questions its
remaining evaluations will answer at the rate its evaluations so far answered them (the one in progress included)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from inspo_engine.config import RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.schedule import evaluation_steps

from .models import Run, StepMetric

Phase = Literal["waiting", "evaluating", "training", "ended"]


@dataclass(frozen=True)
class RunProgress:
    """A run's progress as the run page and the API show it."""

    phase: Phase
    text: str
    """The phase in words: 'evaluating the untrained policy: 23 / 64 questions', 'training step 3 / 12'."""
    fraction: float
    """The share of the run's work done, 0–1: steps and evaluation questions weighed by their measured durations
    once both are known, else each step and each evaluation counted as one."""
    eta_seconds: float | None
    """Seconds left; None while a rate it needs is unknown (no step or no evaluated question yet) or the run ended."""
    step_seconds: float | None
    """The mean duration of the steps so far."""
    question_seconds: float | None
    """Seconds per evaluation question so far."""
    remaining_steps: int
    remaining_questions: int | None
    """Questions its remaining evaluations will answer (the rest of the one in progress included); None when the
    size of an evaluation is not known yet."""
    evaluation: dict[str, int] | None
    """{step, done, total} of the evaluation in progress; None when none is."""


def _schedule(run: Run) -> tuple[list[int], int, int | None]:
    """The steps the run evaluates at, its steps, and the questions of one evaluation when its config bounds them."""
    try:
        config = RunConfig.from_dict(dict(run.config))
    except (ConfigError, TypeError, ValueError):
        return [run.total_steps], run.total_steps, None
    if not config.eval.benchmarks:
        return [], run.total_steps or config.grpo.total_steps, None
    samples = config.eval.eval_samples
    steps = evaluation_steps(config)
    return steps, run.total_steps or steps[-1], samples * len(config.eval.benchmarks) if samples else None


def step_seconds_so_far(run: Run) -> list[float]:
    """Each recorded step's duration: the sum of its timed parts."""
    rows = StepMetric.objects.filter(run=run, step__lte=run.step).values_list("timings", flat=True)
    return [float(sum(v for v in timings.values() if isinstance(v, int | float))) for timings in rows if timings]


def run_progress(run: Run, step_seconds: Sequence[float] | None = None, *, now: float | None = None) -> RunProgress:
    """The run's progress; `step_seconds` (default: read) are its steps' durations so far."""
    now = time.time() if now is None else now
    schedule, total_steps, per_evaluation = _schedule(run)
    progress: dict[str, Any] = dict(run.evaluation_progress or {})
    current = progress.get("step")
    size = int(progress.get("total") or 0) or per_evaluation
    done_now = int(progress.get("done") or 0)
    active = run.status in (Run.Status.RUNNING, Run.Status.CANCELLING)
    evaluating = active and current == run.step and size is not None and done_now < size and "done" in progress
    evaluated_here = current == run.step and size is not None and done_now >= size
    upcoming = [s for s in schedule if s > run.step or (s == run.step and not evaluated_here and not evaluating)]
    remaining_questions = None if size is None else len(upcoming) * size + (size - done_now if evaluating else 0)
    remaining_steps = max(0, total_steps - run.step)

    durations = [s for s in (step_seconds if step_seconds is not None else step_seconds_so_far(run)) if s > 0]
    per_step = statistics.fmean(durations) if durations else None
    per_question = _question_seconds(progress, evaluating, now)
    answered = int(progress.get("questions") or 0) + (done_now if evaluating else 0)

    if per_step is not None and per_question is not None and remaining_questions is not None:
        done_work = run.step * per_step + answered * per_question
        left = remaining_steps * per_step + remaining_questions * per_question
        fraction = done_work / (done_work + left) if done_work + left > 0 else 1.0
    else:
        evaluations = len(schedule)
        finished = int(progress.get("evaluations") or 0) + (done_now / size if evaluating and size else 0.0)
        units = total_steps + evaluations
        fraction = (run.step + min(finished, evaluations)) / units if units else 0.0
    eta = None
    if active and remaining_questions is not None:
        needs_steps, needs_questions = remaining_steps > 0, remaining_questions > 0
        if (per_step is not None or not needs_steps) and (per_question is not None or not needs_questions):
            eta = remaining_steps * (per_step or 0.0) + remaining_questions * (per_question or 0.0)
    if run.status == Run.Status.FINISHED:
        fraction, eta = 1.0, None
    return RunProgress(
        phase=_phase(run, evaluating),
        text=_text(run, evaluating, current, done_now, size, total_steps),
        fraction=max(0.0, min(1.0, fraction)),
        eta_seconds=eta,
        step_seconds=per_step,
        question_seconds=per_question,
        remaining_steps=remaining_steps,
        remaining_questions=remaining_questions,
        evaluation={"step": run.step, "done": done_now, "total": int(size or 0)} if evaluating else None,
    )


def _question_seconds(progress: dict[str, Any], evaluating: bool, now: float) -> float | None:
    """Seconds per question over the run's finished evaluations and the one in progress."""
    seconds, questions = float(progress.get("seconds") or 0.0), int(progress.get("questions") or 0)
    if evaluating and int(progress.get("done") or 0) > 0 and "started" in progress:
        seconds += max(0.0, float(progress.get("time") or now) - float(progress["started"]))
        questions += int(progress["done"])
    return seconds / questions if questions and seconds > 0 else None


def _phase(run: Run, evaluating: bool) -> Phase:
    if run.status in (Run.Status.PENDING, Run.Status.QUEUED):
        return "waiting"
    if run.status not in (Run.Status.RUNNING, Run.Status.CANCELLING):
        return "ended"
    return "evaluating" if evaluating else "training"


def _text(run: Run, evaluating: bool, step: Any, done: int, size: int | None, total_steps: int) -> str:
    if run.status == Run.Status.PENDING:
        return "waiting for a slot of the team's active runs"
    if run.status == Run.Status.QUEUED:
        return f"queued for the {run.queue} workers"
    if run.status not in (Run.Status.RUNNING, Run.Status.CANCELLING):
        return f"{run.status}: {run.step} / {total_steps} steps"
    if evaluating:
        what = "the untrained policy" if step == 0 else f"step {step}"
        return f"evaluating {what}: {done} / {size} questions"
    return f"training step {min(run.step + 1, total_steps)} / {total_steps}"
