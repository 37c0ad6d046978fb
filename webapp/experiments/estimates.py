"""What an experiment will cost before it starts, and how long it has left while it runs: worker time per run from
the team's own finished runs of the preset, each scaled to the new runs' steps and evaluation questions, as a range
over those past runs; and the queue ahead of it, the runs queued and running on the same Celery queue with the time
each has left. A team with no finished run of the preset gets the preset's stated figure, labelled as such.

How a past run is scaled (`PastRun.scaled`): the part of its worker time its steps' own timings account for goes per
step, the rest (its evaluations, and the set-up before its first step) per evaluation question it answered, so a run
of 12 steps evaluated on 64 questions is estimated from one of 8 steps on 32 as 12 × its seconds per step plus 64 ×
its other seconds per question. The range is the lowest to the highest of the past runs so scaled; the middle figure
their median."""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from inspo_engine.config import RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.experiments import MAX_SEEDS, EvalSpec, arm_config, experiment_from_dict
from inspo_engine.schedule import evaluation_steps
from webapp.accounts.models import Team
from webapp.runs.models import Evaluation, Run, StepMetric
from webapp.runs.progress import run_progress

from .models import runs_over_limit

MINUTES_PER_RUN: dict[str, float | None] = {"smoke": 5.0, "cpu-demo": 25.0, "paper": None}
"""Each preset's stated wall-clock time of one run on the platform's default CPU worker, for a team that has not
finished a run of it yet (docs/experiments.md): smoke 4 min 17 s to 5 min 33 s measured per run with an 8-question
evaluation on two busy cores; cpu-demo the 21 min 42 s measured for `make demo` in float32 (its 195-question
evaluation included) on two idle cores, rounded up: in bf16 mixed precision, which the preset's `auto` picks on a CPU
with bfloat16 instructions, a run took 14–16 minutes alone on two cores with AMX (docs/precision.md), but a CPU
without them computes in float32, so the estimate keeps the float32 figure; the paper preset trains a 3B model on
GPUs, for hours, and has no figure here."""
PRESET_RANGES: dict[str, tuple[float, float]] = {"smoke": (4.3, 5.6), "cpu-demo": (14.0, 25.0)}
"""The range behind each stated figure (minutes per run), as measured above."""
MEASURED_RUNS = 20
"""An estimate from the team's own runs is made from its newest this-many finished runs of the preset."""

Basis = Literal["team", "preset", "none", "limit"]


@dataclass(frozen=True)
class RunShape:
    """What one run of the experiment will do: its steps and the evaluation questions it will answer in all (every
    evaluation, every benchmark; None when a benchmark's size is not known)."""

    steps: int
    evaluations: int
    questions_per_evaluation: int | None
    queue: str = "cpu"
    """The Celery queue its backend trains on."""

    @property
    def questions(self) -> int | None:
        if self.questions_per_evaluation is None:
            return None
        return self.evaluations * self.questions_per_evaluation


@dataclass(frozen=True)
class PastRun:
    """A finished run of the team: its worker time (start to finish), its steps, the minutes its steps' timings
    account for, and the evaluation questions it answered."""

    minutes: float
    steps: int
    step_minutes: float
    questions: int

    def scaled(self, shape: RunShape) -> float:
        """Its worker time for a run of `shape`: its minutes per step × the steps, plus its other minutes per
        evaluation question × the questions (by steps alone where it or `shape` has no question count).

        >>> PastRun(minutes=10.0, steps=8, step_minutes=6.0, questions=32).scaled(RunShape(12, 1, 64))
        17.0
        >>> PastRun(minutes=10.0, steps=8, step_minutes=0.0, questions=0).scaled(RunShape(4, 1, None))
        5.0
        """
        steps = max(1, self.steps)
        if self.step_minutes <= 0 or not self.questions or shape.questions is None:
            return self.minutes * shape.steps / steps
        rest = max(0.0, self.minutes - self.step_minutes)
        return self.step_minutes / steps * shape.steps + rest / self.questions * shape.questions


@dataclass(frozen=True)
class Estimate:
    """What an experiment of `runs` runs of a preset would cost, what the figure is based on, and the queue ahead."""

    runs: int
    minutes_per_run: float | None
    """The middle figure: the median of the team's past runs scaled to these runs, or the preset's stated figure."""
    basis: Basis
    """team: the team's finished runs of the preset; preset: the preset's stated figure; none: no figure; limit: the
    experiment is over a limit (`text` names it), so nothing is estimated."""
    measured_runs: int
    """The team's finished runs of the preset behind a `team` estimate (0 otherwise)."""
    text: str
    """The estimate in words, as the New experiment form shows it."""
    minutes_low: float | None = None
    minutes_high: float | None = None
    """The range of one run's worker time: the lowest and highest past run scaled to these runs (the preset's
    measured range for a `preset` estimate)."""
    worker_minutes: list[float] | None = None
    """[low, middle, high] worker minutes of all the runs."""
    steps: int | None = None
    """Steps of one run."""
    questions: int | None = None
    """Evaluation questions one run answers in all (None: a benchmark's size is not known)."""
    queue: str = "cpu"
    queue_runs: int = 0
    """Runs queued or running on the same queue now, of every team (the experiment's own not counted)."""
    queue_minutes: float = 0.0
    """The time those runs have left, summed: running ones by their progress, queued ones by their estimate."""
    slots: int = 1
    """Runs the queue serves at once, as far as can be seen: those running on it now (one when none is)."""
    finish_minutes: list[float] | None = None
    """[low, middle, high] minutes from submission until the last run ends: the queue ahead shared among the slots,
    then the runs, as many at once as the slots and the team's active-run quota allow."""
    method: str = ""
    """How the range was made, in words."""
    at: str = field(default_factory=lambda: timezone.now().isoformat())
    """When it was made."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _minutes(value: float) -> str:
    """Minutes as the estimate writes them: one decimal under ten, hours from two hours on.

    >>> _minutes(3.16), _minutes(25.0), _minutes(150)
    ('3.2 min', '25 min', '2.5 h')
    """
    if value >= 120:
        return f"{value / 60:.1f} h"
    return f"{value:.1f} min" if value < 10 else f"{value:.0f} min"


def _span(low: float, high: float) -> str:
    """A range of minutes in words (one figure when both ends read the same).

    >>> _span(4.26, 5.58), _span(20, 20.2)
    ('4.3–5.6 min', '20 min')
    """
    a, b = _minutes(low), _minutes(high)
    if a == b:
        return a
    if a.split()[1] == b.split()[1]:
        return f"{a.split()[0]}–{b}"
    return f"{a}–{b}"


# -- the runs' shape ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _builtin_questions(split: str) -> int:
    from inspo_engine.env.datasets import load_questions

    return len(load_questions("builtin", split))


def benchmark_questions(name: str, *, team: Team | None, split: str, size: int) -> int | None:
    """Questions one evaluation of the benchmark answers: `size`, or all of the split (0), no more than the split
    holds when that is known: the built-in split's, a data reference's stored count, else the most a run of the team
    evaluated on it; None when nothing tells."""
    known: int | None = None
    try:
        if name == "builtin":
            known = _builtin_questions(split)
        elif name.startswith("data:") and team is not None:
            from webapp.data.references import data_snapshot

            snapshot = data_snapshot(name, team=team, field="benchmarks", kind="questions", split=split)
            known = snapshot.files[split].records
    except Exception:  # an unknown name or split: the team's past evaluations may still tell
        known = None
    if known is None and team is not None:
        seen = Evaluation.objects.filter(run__team=team, benchmark=name[:200], metric="em").order_by("-n").first()
        known = seen.n if seen is not None else None
    if size:
        return min(size, known) if known is not None else size
    return known


def run_shape(config: RunConfig, *, team: Team | None) -> RunShape:
    """The steps and evaluations of a run of `config`."""
    evaluation = config.eval
    per: int | None = 0
    for name in evaluation.benchmarks:
        count = benchmark_questions(name, team=team, split=evaluation.split, size=evaluation.eval_samples)
        per = None if per is None or count is None else per + count
    steps = evaluation_steps(config)
    evaluations = len(steps) if evaluation.benchmarks else 0
    queue = "gpu" if config.backend.name == "verl" else "cpu"
    return RunShape(steps=steps[-1], evaluations=evaluations, questions_per_evaluation=per, queue=queue)


def experiment_shape(
    *, team: Team | None, preset: str, overrides: Mapping[str, Any] | None, evaluation: Mapping[str, Any] | None
) -> RunShape | None:
    """The shape of the first arm's run of such an experiment (the arms share steps and evaluation unless an arm's
    own overrides change them); None when it does not validate."""
    spec = {"preset": preset, "overrides": dict(overrides or {}), "arms": ["static"], "seeds": 1}
    if evaluation:
        spec["evaluation"] = dict(evaluation)
    try:
        experiment = experiment_from_dict(spec)
        return run_shape(arm_config(experiment, "static", experiment.seeds[0]), team=team)
    except (ConfigError, TypeError, ValueError):
        return None


# -- the team's past runs -------------------------------------------------------------------------------------


def past_runs(*, team: Team, preset: str) -> list[PastRun]:
    """The team's newest finished runs of the preset (at most MEASURED_RUNS), with what each did."""
    rows = list(
        Run.objects.filter(team=team, preset=preset, status=Run.Status.FINISHED)
        .exclude(started_at=None)
        .exclude(finished_at=None)
        .order_by("-finished_at")
        .values_list("pk", "started_at", "finished_at", "total_steps")[:MEASURED_RUNS]
    )
    ids = [row[0] for row in rows]
    step_seconds: dict[Any, float] = defaultdict(float)
    for run_id, timings in StepMetric.objects.filter(run_id__in=ids).values_list("run_id", "timings"):
        step_seconds[run_id] += sum(v for v in (timings or {}).values() if isinstance(v, int | float))
    answered = dict(
        Evaluation.objects.filter(run_id__in=ids, metric="em", request=None)
        .values("run_id")
        .annotate(n=Sum("n"))
        .values_list("run_id", "n")
    )
    past = []
    for run_id, started, finished, steps in rows:
        if started is None or finished is None or finished < started:
            continue
        minutes = (finished - started).total_seconds() / 60
        step_minutes = min(minutes, step_seconds.get(run_id, 0.0) / 60)
        past.append(PastRun(minutes, int(steps or 0), step_minutes, int(answered.get(run_id) or 0)))
    return past


# -- the queue ahead ------------------------------------------------------------------------------------------


def _typical_minutes(team_id: int, preset: str, cache: dict[tuple[int, str], float | None]) -> float | None:
    """A run of the team's preset, unscaled: the median of its finished runs, else the preset's figure."""
    key = (team_id, preset)
    if key not in cache:
        past = [p.minutes for p in past_runs(team=Team(pk=team_id), preset=preset)]
        cache[key] = statistics.median(past) if past else MINUTES_PER_RUN.get(preset)
    return cache[key]


def remaining_minutes(run: Run, cache: dict[tuple[int, str], float | None], *, now: datetime | None = None) -> float:
    """The time a queued or running run has left: a running run's time left by its progress (else its typical
    duration less the time it has run), a queued one's typical duration; 0 where nothing tells."""
    typical = _typical_minutes(run.team_id, run.preset, cache) or 0.0
    if run.status in (Run.Status.QUEUED, Run.Status.PENDING) or run.started_at is None:
        return typical
    eta = run_progress(run).eta_seconds
    if eta is not None:
        return eta / 60
    ran = ((now or timezone.now()) - run.started_at).total_seconds() / 60
    return max(0.0, typical - ran)


ON_QUEUE = (Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.CANCELLING)


def queue_runs(queue: str) -> list[Run]:
    """Runs queued or running on the Celery queue (`cpu` or `gpu`) now, of every team."""
    runs = Run.objects.filter(status__in=ON_QUEUE)
    return list(runs.filter(backend="verl") if queue == "gpu" else runs.exclude(backend="verl"))


def queue_ahead(queue: str) -> tuple[int, float, int]:
    """Runs queued or running on the queue now, the minutes they have left, and the runs the queue serves at once
    (those running now, at least one)."""
    listed, cache = queue_runs(queue), dict[tuple[int, str], float | None]()
    running = sum(1 for run in listed if run.status != Run.Status.QUEUED)
    return len(listed), sum(remaining_minutes(run, cache) for run in listed), max(1, running)


# -- the estimate ---------------------------------------------------------------------------------------------


def experiment_estimate(
    *,
    team: Team | None,
    preset: str,
    arms: int,
    seeds: int,
    overrides: Mapping[str, Any] | None = None,
    evaluation: Mapping[str, Any] | None = None,
    queue: str | None = None,
) -> Estimate:
    """The cost of `arms` × `seeds` runs of `preset` with these shared overrides and evaluation (their steps and
    evaluation questions): per run, the team's finished runs of the preset scaled to them (`PastRun.scaled`) when it
    has any, else the preset's stated figure; and the queue ahead. An experiment past the limits on seeds or runs is
    not estimated; its text names the limit."""
    runs = max(0, arms) * max(0, seeds)
    if seeds > MAX_SEEDS:
        return Estimate(runs, None, "limit", 0, f"{seeds} seeds: an experiment takes at most {MAX_SEEDS} per arm")
    if too_many := runs_over_limit(runs):
        return Estimate(runs, None, "limit", 0, too_many)
    shape = experiment_shape(team=team, preset=preset, overrides=overrides, evaluation=evaluation)
    queue = queue or (shape.queue if shape is not None else "cpu")
    past = past_runs(team=team, preset=preset) if team is not None else []
    ahead, ahead_minutes, slots = queue_ahead(queue)
    common: dict[str, Any] = {
        "steps": shape.steps if shape else None,
        "questions": shape.questions if shape else None,
        "queue": queue,
        "queue_runs": ahead,
        "queue_minutes": ahead_minutes,
        "slots": slots,
    }
    if past and shape is not None:
        scaled = sorted(p.scaled(shape) for p in past)
        low, middle, high = scaled[0], statistics.median(scaled), scaled[-1]
        what = "steps and evaluation questions" if shape.questions is not None else "steps"
        method = (
            f"the lowest, median and highest of your team's {len(past)} finished {preset} "
            f"run{'s' if len(past) != 1 else ''}, each scaled to {shape.steps} steps"
            + (f" and {shape.questions} evaluation questions" if shape.questions is not None else "")
            + f" (its minutes per step and its other minutes per evaluation question; by {what})"
        )
        basis: Basis = "team"
    elif (stated := MINUTES_PER_RUN.get(preset)) is not None:
        low, high = PRESET_RANGES.get(preset, (stated, stated))
        middle = stated
        method = (
            f"the {preset} preset's stated figure and its measured range (your team has no finished {preset} run "
            "yet), not scaled to these steps and questions"
        )
        basis = "preset"
    else:
        why = "GPU hours each" if preset in MINUTES_PER_RUN else "no figure yet"
        text = f"{runs} runs of the {preset} preset: {why}, no estimate until your team has finished one"
        return Estimate(runs, None, "none", 0, text, **common)
    parallel = max(1, min(slots, runs or 1, settings.INSPO_TEAM_MAX_ACTIVE_RUNS or runs or 1))
    wait = ahead_minutes / slots
    worker = [runs * low, runs * middle, runs * high]
    finish = [wait + minutes / parallel for minutes in worker]
    estimate = Estimate(
        runs,
        middle,
        basis,
        len(past) if basis == "team" else 0,
        "",
        minutes_low=low,
        minutes_high=high,
        worker_minutes=worker,
        finish_minutes=finish,
        method=method,
        **common,
    )
    return _with_text(estimate)


def _with_text(estimate: Estimate) -> Estimate:
    """The estimate in words: worker time per run and in all, the queue ahead, and when it will be done."""
    assert estimate.minutes_low is not None and estimate.minutes_high is not None
    assert estimate.worker_minutes is not None and estimate.finish_minutes is not None
    per = _span(estimate.minutes_low, estimate.minutes_high)
    total = _span(estimate.worker_minutes[0], estimate.worker_minutes[2])
    if estimate.basis == "team":
        source = f"from your team's {estimate.measured_runs} finished run{'s' if estimate.measured_runs != 1 else ''}"
        source += " of the preset, scaled to these steps and questions"
    else:
        source = "the preset's stated figure, not your team's: it has no finished run of the preset to measure yet"
    queue = (
        f"{estimate.queue_runs} run{'s' if estimate.queue_runs != 1 else ''} ahead on the {estimate.queue} queue "
        f"(~{_minutes(estimate.queue_minutes)} left)"
        if estimate.queue_runs
        else f"nothing ahead on the {estimate.queue} queue"
    )
    done = _span(estimate.finish_minutes[0], estimate.finish_minutes[2])
    text = (
        f"{estimate.runs} runs × {per} ≈ {total} of worker time ({source}); {queue}; finished in about {done} from now"
    )
    return Estimate(**{**asdict(estimate), "text": text})


def estimate_for_experiment(spec: Mapping[str, Any], *, team: Team, runs: int) -> Estimate:
    """The estimate of an experiment as submitted (`spec` as the engine read it), to be kept with it."""
    evaluation = spec.get("evaluation")
    return experiment_estimate(
        team=team,
        preset=str(spec["preset"]),
        arms=runs,
        seeds=1,
        overrides=spec.get("overrides"),
        evaluation=EvalSpec.from_dict(evaluation).to_dict() if isinstance(evaluation, Mapping) else None,
    )


# -- an experiment under way, and once it has ended ----------------------------------------------------------------

ENDED = (Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED)


def _span_minutes(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() / 60 if start is not None and end is not None and end >= start else None


def run_durations(run: Run) -> dict[str, Any]:
    """One run's durations in minutes: worker time (start to finish), the wait from submission to its start (in the
    team's pending runs and on the queue), and submission to finish; None where it has not got there."""
    return {
        "id": str(run.pk),
        "arm": run.arm,
        "seed": run.seed,
        "status": run.status,
        "worker_minutes": _span_minutes(run.started_at, run.finished_at),
        "wait_minutes": _span_minutes(run.created_at, run.started_at),
        "total_minutes": _span_minutes(run.created_at, run.finished_at),
    }


def experiment_remaining(runs: list[Run], *, now: datetime | None = None) -> tuple[float | None, int, int]:
    """Minutes until the experiment's last run ends, the runs of others ahead of its waiting ones on the queue, and
    its own runs still to end: its runs' time left and that of the others' runs ahead (running, or queued before
    its first waiting run), shared among the runs the queue serves at once; no less than its longest running run's
    time left. None when it has ended."""
    own = [run for run in runs if run.status not in ENDED]
    if not own:
        return None, 0, 0
    ids = {run.pk for run in runs}
    on_queue = queue_runs(own[0].queue)
    waiting = [run.queued_at for run in own if run.status in (Run.Status.PENDING, Run.Status.QUEUED)]
    first_waiting = min(waiting) if waiting else None
    ahead = [
        run
        for run in on_queue
        if run.pk not in ids
        and (run.status != Run.Status.QUEUED or (first_waiting is not None and run.queued_at < first_waiting))
    ]
    cache: dict[tuple[int, str], float | None] = {}
    slots = max(1, sum(1 for run in on_queue if run.status != Run.Status.QUEUED))
    mine = [remaining_minutes(run, cache, now=now) for run in own]
    running = [m for run, m in zip(own, mine, strict=True) if run.status in (Run.Status.RUNNING, Run.Status.CANCELLING)]
    shared = (sum(remaining_minutes(run, cache, now=now) for run in ahead) + sum(mine)) / slots
    return max([shared, *running]), len(ahead), len(own)


def _error(actual: float | None, estimated: Any) -> dict[str, Any] | None:
    """How far the actual minutes fell from an estimate's [low, middle, high]."""
    if actual is None or not isinstance(estimated, list) or len(estimated) != 3:
        return None
    low, middle, high = (float(x) for x in estimated)
    return {
        "estimated": middle,
        "low": low,
        "high": high,
        "actual": actual,
        "error_minutes": actual - middle,
        "error_percent": 100 * (actual - middle) / middle if middle else None,
        "within_range": low <= actual <= high,
    }


def experiment_timing(experiment: Any, runs: list[Run], *, ended: bool) -> dict[str, Any]:
    """What the experiment's page shows of time: while it runs, the time left; once it has ended, each run's
    durations and the estimate made at submission against what happened (worker time, and submission to the end of
    its last run)."""
    estimate: dict[str, Any] = dict(experiment.estimate or {})
    durations = [run_durations(run) for run in runs]
    worker = [d["worker_minutes"] for d in durations if d["worker_minutes"] is not None]
    finished = [run.finished_at for run in runs if run.finished_at is not None]
    timing: dict[str, Any] = {
        "estimate": estimate or None,
        "runs": durations,
        "worker_minutes": sum(worker) if worker else None,
        "elapsed_minutes": _span_minutes(experiment.created_at, max(finished)) if ended and finished else None,
        "remaining_minutes": None,
        "queue_runs": 0,
        "worker_error": None,
        "finish_error": None,
    }
    if not ended:
        remaining, ahead, left = experiment_remaining(runs)
        timing |= {"remaining_minutes": remaining, "queue_runs": ahead}
        queue = f"; {ahead} run{'s' if ahead != 1 else ''} of others ahead on the queue" if ahead else ""
        left_text = f"about {_minutes(remaining)} left" if remaining is not None else "time left unknown"
        timing["text"] = f"{left_text} ({left} of its runs still to end{queue})"
        return timing
    timing["worker_error"] = _error(timing["worker_minutes"], estimate.get("worker_minutes"))
    timing["finish_error"] = _error(timing["elapsed_minutes"], estimate.get("finish_minutes"))
    timing["text"] = _error_text(timing["worker_error"], timing["finish_error"], bool(estimate))
    return timing


def _error_text(worker: dict[str, Any] | None, finish: dict[str, Any] | None, estimated: bool) -> str:
    if not estimated:
        return "No estimate was kept at its submission (it was submitted before estimates were)."
    parts = []
    for what, error in (("worker time", worker), ("submission to the end", finish)):
        if error is None:
            continue
        signed = f"{error['error_minutes']:+.1f} min"
        share = f", {error['error_percent']:+.0f} %" if error["error_percent"] is not None else ""
        where = "within" if error["within_range"] else "outside"
        parts.append(
            f"{what} {_minutes(error['actual'])} against {_minutes(error['estimated'])} estimated "
            f"({_span(error['low'], error['high'])}): {signed}{share}, {where} the range"
        )
    return "; ".join(parts) + "." if parts else "The estimate kept at its submission gave no figure."
