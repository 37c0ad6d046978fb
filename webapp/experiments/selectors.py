"""Reads about experiments, always scoped to the user asking: the list, one experiment (404 for another team's), its
runs, whether it has ended, its table and verdicts — computed by the engine's `experiment_results` from the runs'
per-question answers, step rewards and the machines they recorded — and what a new one would cost."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from django.db.models import QuerySet
from django.http import Http404

from inspo_engine.experiments import MAX_SEEDS, EvalSpec, experiment_results, run_name
from inspo_engine.experiments import Experiment as EngineExperiment
from webapp.accounts.models import Team
from webapp.accounts.permissions import AnyUser
from webapp.runs.models import EvaluationAnswer, Run, RunNote, StepMetric

from .models import Experiment, runs_over_limit

ENDED = (Run.Status.FINISHED, Run.Status.FAILED, Run.Status.CANCELLED)
SCORE_METRIC = "em"
"""The per-question score the verdicts compare."""


def experiment_list(*, user: AnyUser) -> QuerySet[Experiment]:
    """Experiments of the user's teams, newest first."""
    if not user.is_authenticated:
        return Experiment.objects.none()
    return Experiment.objects.filter(team__memberships__user=user).select_related("team", "created_by")


def experiment_get(*, user: AnyUser, experiment_id: int) -> Experiment:
    """One experiment of the user's teams; 404 for another team's, as for one that does not exist."""
    experiment = experiment_list(user=user).filter(pk=experiment_id).first()
    if experiment is None:
        raise Http404("no such experiment")
    return experiment


def experiment_runs(*, experiment: Experiment) -> list[Run]:
    """Its runs in arm order (as the experiment lists its arms), then by seed."""
    order = {arm: i for i, arm in enumerate(experiment.arm_names)}
    runs = list(Run.objects.filter(experiment=experiment).order_by("seed", "created_at"))
    return sorted(runs, key=lambda run: (order.get(run.arm, len(order)), run.seed))


def experiment_state(*, experiment: Experiment, runs: list[Run]) -> str:
    """cancelled (a person cancelled it), running (a run is pending, queued, running or cancelling) or finished
    (every run ended: finished, failed or cancelled)."""
    if experiment.status == Experiment.Status.CANCELLED:
        return "cancelled"
    return "finished" if all(run.status in ENDED for run in runs) else "running"


def run_counts(runs: list[Run]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for run in runs:
        counts[run.status] += 1
    return dict(counts)


ArmScores = dict[str, dict[str, dict[int, dict[str, float]]]]
"""arm → benchmark → seed → question id → score."""


def _answers(runs: list[Run], benchmarks: list[str]) -> tuple[ArmScores, ArmScores]:
    """Per arm, per benchmark (named as the experiment names it), per seed, each question's EM and F1 from the
    run's newest evaluation of that benchmark that kept per-question results."""
    names = {run.pk: benchmark_names(run, benchmarks) for run in runs}
    newest: dict[tuple[Any, str], tuple[int, int]] = {}
    for run_id, benchmark, evaluation_id, step in (
        EvaluationAnswer.objects.filter(evaluation__run__in=runs, evaluation__metric=SCORE_METRIC)
        .order_by()
        .values_list("evaluation__run_id", "evaluation__benchmark", "evaluation_id", "evaluation__step")
        .distinct()
    ):
        if (name := names[run_id].get(benchmark)) is not None:
            newest[run_id, name] = max(newest.get((run_id, name), (step, evaluation_id)), (step, evaluation_id))
    chosen = {evaluation_id: key for key, (_, evaluation_id) in newest.items()}
    em: dict[tuple[Any, str], dict[str, float]] = defaultdict(dict)
    f1: dict[tuple[Any, str], dict[str, float]] = defaultdict(dict)
    rows = EvaluationAnswer.objects.filter(evaluation_id__in=chosen).order_by("id")
    for evaluation_id, question_id, em_value, f1_value in rows.values_list("evaluation_id", "question_id", "em", "f1"):
        em[chosen[evaluation_id]][question_id] = em_value
        f1[chosen[evaluation_id]][question_id] = f1_value
    by_arm_em: ArmScores = defaultdict(dict)
    by_arm_f1: ArmScores = defaultdict(dict)
    for run in runs:
        for name in benchmarks:
            if (run.pk, name) in em:
                by_arm_em[run.arm].setdefault(name, {})[run.seed] = em[run.pk, name]
                by_arm_f1[run.arm].setdefault(name, {})[run.seed] = f1[run.pk, name]
    return dict(by_arm_em), dict(by_arm_f1)


def benchmark_names(run: Run, benchmarks: list[str]) -> dict[str, str]:
    """How the run's evaluations name each of the experiment's benchmarks → the experiment's name: as the experiment
    does, or as the run's config stores it once admitted (a file resolved to its path), position by position."""
    stored = (run.config.get("eval") or {}).get("benchmarks") or []
    names = {name: name for name in benchmarks}
    if len(stored) == len(benchmarks):
        names |= {str(path)[:200]: name for path, name in zip(stored, benchmarks, strict=True)}
    return names


def _rewards(runs: list[Run]) -> dict[str, dict[int, list[float]]]:
    """Per arm, per seed, the training reward of each step in step order."""
    by_run: dict[Any, list[float]] = defaultdict(list)
    rows = StepMetric.objects.filter(run__in=runs).order_by("run_id", "step").values_list("run_id", "reward_mean")
    for run_id, reward in rows:
        by_run[run_id].append(reward)
    rewards: dict[str, dict[int, list[float]]] = defaultdict(dict)
    for run in runs:
        rewards[run.arm][run.seed] = by_run.get(run.pk, [])
    return dict(rewards)


def _machines(runs: list[Run]) -> dict[str, dict[str, str] | None]:
    """Per run that started, named as the engine names it (`static-s0`), what its latest start recorded computing on
    (its `run_started` note; None where it recorded nothing)."""
    latest: dict[Any, dict[str, str] | None] = {}
    notes = RunNote.objects.filter(run__in=runs, kind="run_started").order_by("time", "id")
    for run_id, payload in notes.values_list("run_id", "payload"):
        latest[run_id] = (payload or {}).get("machine") or None
    return {run_name(run.arm, run.seed): latest[run.pk] for run in runs if run.pk in latest}


def engine_experiment(experiment: Experiment) -> EngineExperiment:
    """The engine's experiment as it was validated when it was submitted (not validated again: a preset or a bound
    that changed since must not hide an experiment's results)."""
    return EngineExperiment(
        preset=experiment.preset,
        overrides=dict(experiment.overrides),
        arms=experiment.arm_overrides,
        seeds=[int(seed) for seed in experiment.seeds],
        evaluation=EvalSpec.from_dict(experiment.evaluation),
        baseline=experiment.baseline,
    )


def experiment_summary(*, experiment: Experiment) -> dict[str, Any]:
    """Everything the experiment's page and its API answer show: its state and its runs, and the engine's table and
    verdicts over the seeds that finished (it lists the missing ones): with several benchmarks, a verdict per
    benchmark and one over their unweighted average; reward curves include running seeds; the runs that started,
    grouped by the machine they computed on."""
    runs = experiment_runs(experiment=experiment)
    finished = [run for run in runs if run.status == Run.Status.FINISHED]
    spec = engine_experiment(experiment)
    em, f1 = _answers(finished, list(spec.evaluation.benchmarks))
    results = experiment_results(spec, em, _rewards(runs), f1_by_arm=f1, machines=_machines(runs))
    return {
        "experiment": experiment,
        "state": experiment_state(experiment=experiment, runs=runs),
        "runs": runs,
        "counts": run_counts(runs),
        "results": results,
    }


# -- what a new experiment would cost ---------------------------------------------------------------------------

MINUTES_PER_RUN: dict[str, float | None] = {"smoke": 5.0, "cpu-demo": 25.0, "paper": None}
"""Each preset's stated wall-clock time of one run on the platform's default CPU worker, for a team that has not
finished a run of it yet (docs/experiments.md): smoke 4 min 17 s to 5 min 33 s measured per run with an 8-question
evaluation on two busy cores; cpu-demo the 21 min 42 s measured for `make demo` in float32 (its 195-question
evaluation included) on two idle cores, rounded up: in bf16 mixed precision, which the preset's `auto` picks on a CPU
with bfloat16 instructions, a run took 14–16 minutes alone on two cores with AMX (docs/precision.md), but a CPU
without them computes in float32, so the estimate keeps the float32 figure; the paper preset trains a 3B model on
GPUs, for hours, and has no figure here."""
MEASURED_RUNS = 20
"""An estimate from the team's own runs takes the median of its newest this-many finished runs of the preset."""


@dataclass(frozen=True)
class Estimate:
    """What an experiment of `runs` runs of a preset would cost, and what the figure is based on."""

    runs: int
    minutes_per_run: float | None
    basis: Literal["team", "preset", "none", "limit"]
    """team: the median of the team's finished runs of the preset; preset: the preset's stated figure; none: no
    figure; limit: the experiment is over a limit (`text` names it), so nothing is estimated."""
    measured_runs: int
    """The team's finished runs of the preset behind a `team` estimate (0 otherwise)."""
    text: str
    """The estimate in words, as the New experiment form shows it."""


def _minutes(value: float) -> str:
    """Minutes per run as the estimate writes them: one decimal under ten.

    >>> _minutes(3.16), _minutes(25.0)
    ('3.2', '25')
    """
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def preset_minutes_measured(*, team: Team, preset: str) -> tuple[float, int] | None:
    """The median wall time (minutes, start to finish) of the team's newest finished runs of the preset, and how many
    it is over; None when it has none."""
    rows = (
        Run.objects.filter(team=team, preset=preset, status=Run.Status.FINISHED)
        .exclude(started_at=None)
        .exclude(finished_at=None)
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:MEASURED_RUNS]
    )
    spans = [(started, finished) for started, finished in rows if started is not None and finished is not None]
    minutes = [(finished - started).total_seconds() / 60 for started, finished in spans if finished >= started]
    return (statistics.median(minutes), len(minutes)) if minutes else None


def experiment_estimate(*, team: Team | None, preset: str, arms: int, seeds: int) -> Estimate:
    """The cost of `arms` × `seeds` runs of `preset`: runs × the median wall time of the team's finished runs of the
    preset when it has any, else runs × the preset's stated figure (MINUTES_PER_RUN); an experiment past the limits
    on seeds or runs is not estimated, its text names the limit."""
    runs = max(0, arms) * max(0, seeds)
    if seeds > MAX_SEEDS:
        return Estimate(runs, None, "limit", 0, f"{seeds} seeds: an experiment takes at most {MAX_SEEDS} per arm")
    if too_many := runs_over_limit(runs):
        return Estimate(runs, None, "limit", 0, too_many)
    measured = preset_minutes_measured(team=team, preset=preset) if team is not None else None
    if measured is not None:
        minutes, count = measured
        basis = f"the median of your team's {count} finished {preset} run{'s' if count != 1 else ''}"
        return Estimate(runs, minutes, "team", count, f"{_cost(runs, minutes)} ({basis})")
    stated = MINUTES_PER_RUN.get(preset)
    if stated is not None:
        basis = f"the {preset} preset's figure; your team has no finished {preset} run to measure yet"
        return Estimate(runs, stated, "preset", 0, f"{_cost(runs, stated)} ({basis})")
    why = "GPU hours each" if preset in MINUTES_PER_RUN else "no figure yet"
    text = f"{runs} runs of the {preset} preset: {why}, no estimate until your team has finished one"
    return Estimate(runs, None, "none", 0, text)


def _cost(runs: int, minutes: float) -> str:
    """`runs` runs of `minutes` each, in words (hours from two hours on).

    >>> _cost(4, 5.0), _cost(12, 25.0)
    ('4 runs × ~5.0 min ≈ 20 min of worker time', '12 runs × ~25 min ≈ 5.0 h of worker time')
    """
    total = runs * minutes
    spent = f"{total / 60:.1f} h" if total >= 120 else f"{total:.0f} min"
    return f"{runs} runs × ~{_minutes(minutes)} min ≈ {spent} of worker time"
