"""Reads about experiments, always scoped to the user asking: the list, one experiment (404 for another team's), its
runs, whether it has ended, its table and verdicts — computed by the engine's `experiment_results` from the runs'
per-question answers, step rewards and the machines they recorded — and what a new one would cost."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from inspo_engine.experiments import EvalSpec, experiment_results, run_name
from inspo_engine.experiments import Experiment as EngineExperiment
from webapp.accounts.permissions import AnyUser
from webapp.runs.models import Checkpoint, EvaluationAnswer, Run, RunNote, StepMetric

from .estimates import MEASURED_RUNS, MINUTES_PER_RUN, Estimate, experiment_estimate, experiment_timing
from .leakage import leakage_rows, leave_out, overlapping_questions
from .models import Experiment

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


def _rewards(runs: list[Run]) -> dict[str, dict[int, dict[int, float]]]:
    """Per arm, per seed, the training reward of each step it has reached: a run waiting to resume from a
    checkpoint has reached that checkpoint's step, whatever its lost attempt recorded after it (which its resumed
    attempt discards when it starts)."""
    rewound = {run.pk: int(run.resume_checkpoint_id or 0) for run in runs if _waits_to_resume(run)}
    reached = dict(Checkpoint.objects.filter(pk__in=list(rewound.values())).values_list("pk", "step"))
    by_run: dict[Any, dict[int, float]] = defaultdict(dict)
    rows = StepMetric.objects.filter(run__in=runs).order_by("run_id", "step")
    for run_id, step, reward in rows.values_list("run_id", "step", "reward_mean"):
        if run_id not in rewound or step <= reached.get(rewound[run_id], step):
            by_run[run_id][step] = reward
    rewards: dict[str, dict[int, dict[int, float]]] = defaultdict(dict)
    for run in runs:
        rewards[run.arm][run.seed] = by_run.get(run.pk, {})
    return dict(rewards)


def _waits_to_resume(run: Run) -> bool:
    """Resumed from a checkpoint and not yet started training from it (its attempt discards the later steps)."""
    return run.resume_checkpoint_id is not None and run.status in (Run.Status.PENDING, Run.Status.QUEUED)


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


def experiment_summary(*, experiment: Experiment, exclude_overlap: bool = False) -> dict[str, Any]:
    """Everything the experiment's page and its API answer show: its state and its runs, and the engine's table and
    verdicts over the seeds that finished (it lists the missing ones): with several benchmarks, a verdict per
    benchmark and one over their unweighted average; reward curves include running seeds; the runs that started,
    grouped by the machine they computed on. `leakage`: per benchmark, how many of its evaluated questions were also
    in a run's training split; with `exclude_overlap`, the table and verdicts are computed without them."""
    runs = experiment_runs(experiment=experiment)
    finished = [run for run in runs if run.status == Run.Status.FINISHED]
    spec = engine_experiment(experiment)
    benchmarks = list(spec.evaluation.benchmarks)
    em, f1 = _answers(finished, benchmarks)
    overlapping = overlapping_questions(runs, {run.pk: benchmark_names(run, benchmarks) for run in runs})
    leakage = leakage_rows(benchmarks, em, overlapping, excluded=exclude_overlap)
    if exclude_overlap:
        em, f1 = leave_out(em, overlapping), leave_out(f1, overlapping)
    results = experiment_results(spec, em, _rewards(runs), f1_by_arm=f1, machines=_machines(runs))
    return {
        "experiment": experiment,
        "state": experiment_state(experiment=experiment, runs=runs),
        "runs": runs,
        "counts": run_counts(runs),
        "results": results,
        "leakage": leakage,
        "exclude_overlap": exclude_overlap,
        "timing": experiment_timing(experiment, runs, ended=all(run.status in ENDED for run in runs)),
    }


# -- what a new experiment would cost, and how long one has left: `estimates` ------------------------------------

__all__ = ["MEASURED_RUNS", "MINUTES_PER_RUN", "Estimate", "experiment_estimate", "experiment_timing"]
