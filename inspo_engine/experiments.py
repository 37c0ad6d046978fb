"""Experiments: named arms × seeds over one base config, every run evaluated on the same questions, and the table of
results with each arm's verdict against a baseline arm. It knows configs, run directories and statistics; it starts
no runs (the CLI and the web app do) and draws nothing.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .coevolution import EVALUATIONS_DIR, evaluation_file_found, read_answers
from .config import RunConfig, resolve_key
from .config_fields import ConfigError, FieldError
from .events import Event, RunFinished, RunStarted, StepCompleted, read_events
from .machine import described, same_machine_groups
from .presets import PRESETS, preset

if TYPE_CHECKING:
    from .stats import Comparison, Scores

    BenchmarkScores = Mapping[str, Scores]
    """benchmark → seed → question id → score."""

BUILTIN_ARMS: dict[str, dict[str, Any]] = {
    "static": {"mode": "static"},
    "inspo": {"mode": "online"},
    "no-verify": {"mode": "online", "evolution.verify": False},
    "random-pool": {"mode": "random-pool"},
}
"""The built-in arms and their overrides: `static` trains with the seed instruction only (the Search-R1 baseline),
`inspo` co-evolves the instructions, `no-verify` is INSPO without verification (the prune-and-expand ablation),
`random-pool` samples INSPO's initial population uniformly and never optimises it (diversity alone)."""

BUILTIN_ARM_MEANINGS: dict[str, str] = {
    "static": "the seed instruction only (the Search-R1 baseline)",
    "inspo": "co-evolves the instructions with the policy",
    "no-verify": "INSPO without verification (prune and expand)",
    "random-pool": "INSPO's initial population, sampled uniformly, never optimised",
}
"""Each built-in arm in one line, as `experiment --help` and the experiment form say it."""

KEYLESS_PROVIDERS = ("rules", "local")
"""Optimizers that need no API key; random-pool's initial population comes from one (`rules` unless the run's own
optimizer is one of these)."""

EXPERIMENT_FIELDS = {
    "seed": "seeds",
    "eval.benchmarks": "evaluation.benchmarks",
    "eval.split": "evaluation.split",
    "eval.eval_samples": "evaluation.size",
    "eval.sample_seed": "evaluation.sample_seed",
}
"""Config fields an experiment sets itself, and the experiment field that sets each."""

MAX_ARMS = 16
MAX_BENCHMARKS = 16
MAX_SEEDS = 50
MAX_SEED = 1_000_000
REWARD_TAIL = 5
"""The table's training reward is the mean over each run's last this-many steps."""
DETECT = 0.05
"""The difference (5 EM points) whose seeds-needed count results report."""
_ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


@dataclass(frozen=True)
class EvalSpec:
    """The held-out evaluation every run of an experiment ends with: the same questions for all of them."""

    benchmarks: tuple[str, ...] = ("builtin",)
    """'builtin' or FlashRAG benchmarks (files or directories); with several, each gets its verdict and so does their
    unweighted average."""
    split: str = "test"
    """The benchmarks' split."""
    size: int = 0
    """Questions drawn from each benchmark's split (0 = all)."""
    sample_seed: int = 0
    """The seed that draws them."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalSpec:
        """A stored evaluation, not validated again; one stored before several benchmarks were allowed names its one
        in `benchmark`.

        >>> EvalSpec.from_dict({"benchmark": "nq.jsonl", "split": "test", "size": 5, "sample_seed": 0}).benchmarks
        ('nq.jsonl',)
        """
        fields = dict(data)
        single = fields.pop("benchmark", None)
        names = fields.pop("benchmarks", None) or ([single] if single is not None else ["builtin"])
        return cls(benchmarks=tuple(str(name) for name in names), **fields)

    def to_dict(self) -> dict[str, Any]:
        """As JSON holds it (the benchmarks a list), and as `from_dict` and `experiment_from_dict` take it."""
        return asdict(self) | {"benchmarks": list(self.benchmarks)}


@dataclass(frozen=True)
class Experiment:
    """A base preset with overrides, named arms (each a set of overrides on top), the seeds every arm runs with, the
    evaluation and the arm the others are compared with."""

    preset: str
    overrides: dict[str, Any]
    arms: dict[str, dict[str, Any]]
    """Arm name → its overrides (a built-in arm's included)."""
    seeds: list[int]
    evaluation: EvalSpec = field(default_factory=EvalSpec)
    baseline: str = "static"

    def to_dict(self) -> dict[str, Any]:
        """As JSON holds it, and as `experiment_from_dict` takes it."""
        return asdict(self) | {"evaluation": self.evaluation.to_dict()}

    def runs(self) -> list[tuple[str, int]]:
        """Every (arm, seed), seed by seed so that stopping early leaves whole seeds."""
        return [(arm, seed) for seed in self.seeds for arm in self.arms]


# -- validation -------------------------------------------------------------------------------------------------


def experiment_from_dict(data: Any) -> Experiment:
    """An experiment from JSON-like data, validated: ConfigError names each bad field ("preset", "seeds",
    "evaluation.size", "evaluation.benchmarks", "overrides.grpo.lr", "arms.foo.grpo.lr", "baseline").

    `arms` is a list of built-in arm names or an object of name → overrides (null or {} for a built-in as it is;
    a built-in's overrides apply on top of its own). `seeds` is a count (0 … n−1) or a list of seeds. The evaluation
    names its benchmarks in `benchmarks` (a list) or its one in `benchmark`, as experiments did before.
    """
    if not isinstance(data, Mapping):
        raise ConfigError([FieldError("", "an experiment must be an object")])
    known = {"preset", "overrides", "arms", "seeds", "evaluation", "baseline"}
    errors = [FieldError(str(key), "unknown field") for key in data if key not in known]
    name = data.get("preset", "cpu-demo")
    if name not in PRESETS:
        errors.append(FieldError("preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}"))
    overrides, found = _overrides(data.get("overrides", {}), "overrides")
    errors += found
    arms, found = _arms(data.get("arms", ["static", "inspo"]))
    errors += found
    seeds, found = _seeds(data.get("seeds", 3))
    errors += found
    evaluation, found = _evaluation(data.get("evaluation", {}))
    errors += found
    baseline = data.get("baseline", "static")
    if not isinstance(baseline, str) or baseline not in arms:
        errors.append(FieldError("baseline", f"must be one of the arms ({', '.join(arms) or 'none given'})"))
    if errors:
        raise ConfigError(errors)
    experiment = Experiment(str(name), overrides, arms, seeds, evaluation, baseline)
    given = data.get("evaluation")
    single = isinstance(given, Mapping) and "benchmark" in given
    try:
        _check_configs(experiment)
    except ConfigError as error:
        if not single:
            raise
        renamed = [FieldError(_BENCHMARK if e.field == _BENCHMARKS else e.field, e.message) for e in error.errors]
        raise ConfigError(renamed) from error
    return experiment


def _overrides(value: Any, where: str) -> tuple[dict[str, Any], list[FieldError]]:
    """An overrides object: keys must name config fields, and none of those the experiment sets itself."""
    if value is None:
        return {}, []
    if not isinstance(value, Mapping):
        return {}, [FieldError(where, "must be an object of field → value")]
    errors = []
    for key in value:
        try:
            path = resolve_key(str(key))
        except ConfigError as error:
            errors += [FieldError(f"{where}.{e.field}", e.message) for e in error.errors]
            continue
        if path in EXPERIMENT_FIELDS:
            errors.append(FieldError(f"{where}.{key}", f"is set by the experiment's {EXPERIMENT_FIELDS[path]}"))
    return {str(k): v for k, v in value.items()}, errors


def _arms(value: Any) -> tuple[dict[str, dict[str, Any]], list[FieldError]]:
    if isinstance(value, list):
        value = {name: None for name in value} if all(isinstance(n, str) for n in value) else value
    if not isinstance(value, Mapping):
        return {}, [FieldError("arms", "must be a list of arm names or an object of name → overrides")]
    if not value or len(value) > MAX_ARMS:
        return {}, [FieldError("arms", f"must name 1 to {MAX_ARMS} arms")]
    arms: dict[str, dict[str, Any]] = {}
    errors = []
    for name, given in value.items():
        if not isinstance(name, str) or not _ARM_NAME.fullmatch(name):
            errors.append(FieldError(f"arms.{name}", "an arm's name: letters, digits, '_', '.', '-' (≤ 32)"))
            continue
        if name not in BUILTIN_ARMS and not given:
            built = ", ".join(BUILTIN_ARMS)
            errors.append(FieldError(f"arms.{name}", f"a custom arm needs overrides (built-in arms: {built})"))
            continue
        overrides, found = _overrides(given, f"arms.{name}")
        errors += found
        arms[name] = {**BUILTIN_ARMS.get(name, {}), **overrides}
    return arms, errors


def _seeds(value: Any) -> tuple[list[int], list[FieldError]]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = list(range(value)) if 1 <= value <= MAX_SEEDS else None
    ok = (
        isinstance(value, list)
        and 1 <= len(value) <= MAX_SEEDS
        and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in value)
        and len(set(value)) == len(value)
    )
    if not ok:
        message = f"a count from 1 to {MAX_SEEDS}, or a list of 1 to {MAX_SEEDS} distinct seeds from 0 to {MAX_SEED}"
        return [], [FieldError("seeds", f"must be {message}")]
    assert isinstance(value, list)
    return list(value), []


_BENCHMARK, _BENCHMARKS = "evaluation.benchmark", "evaluation.benchmarks"


def _evaluation(value: Any) -> tuple[EvalSpec, list[FieldError]]:
    if not isinstance(value, Mapping):
        return EvalSpec(), [FieldError("evaluation", "must be an object")]
    known = {"benchmark", *EvalSpec.__annotations__}
    errors = [FieldError(f"evaluation.{key}", "unknown field") for key in value if key not in known]
    kinds: dict[str, type] = {"split": str, "size": int, "sample_seed": int}
    for key, kind in kinds.items():
        item = value.get(key)
        if item is not None and (not isinstance(item, kind) or isinstance(item, bool)):
            errors.append(FieldError(f"evaluation.{key}", f"must be a{'n integer' if kind is int else ' string'}"))
    benchmarks, found = _benchmarks(value)
    if errors or found:
        return EvalSpec(), errors + found
    fields = {k: v for k, v in value.items() if v is not None and k in kinds}
    return EvalSpec(benchmarks=benchmarks, **fields), []


def _benchmarks(value: Mapping[str, Any]) -> tuple[tuple[str, ...], list[FieldError]]:
    """`benchmarks`, a list of distinct names, or `benchmark`, one name; 'builtin' when neither is given."""
    single, names = value.get("benchmark"), value.get("benchmarks")
    if single is not None and names is not None:
        return (), [FieldError(_BENCHMARKS, "give benchmarks (a list) or benchmark (one name), not both")]
    if single is not None:
        if not isinstance(single, str) or not single:
            return (), [FieldError(_BENCHMARK, "must be a benchmark's name: a non-empty string")]
        return (single,), []
    if names is None:
        return EvalSpec().benchmarks, []
    ok = (
        isinstance(names, list)
        and 1 <= len(names) <= MAX_BENCHMARKS
        and all(isinstance(name, str) and name for name in names)
        and len(set(names)) == len(names)
    )
    if not ok:
        return (), [FieldError(_BENCHMARKS, f"must be a list of 1 to {MAX_BENCHMARKS} distinct benchmark names")]
    return tuple(names), []


def _check_configs(experiment: Experiment) -> None:
    """Build the base config, then every arm's, each validated like a run's; errors carry the experiment's path."""
    base = preset(experiment.preset)
    try:
        base = base.with_overrides(experiment.overrides)
    except ConfigError as error:
        raise ConfigError([FieldError(_where(e.field, "overrides"), e.message) for e in error.errors]) from error
    try:
        base = base.with_overrides(_eval_overrides(experiment, experiment.seeds[0]))
    except ConfigError as error:
        raise ConfigError([FieldError(_where(e.field, ""), e.message) for e in error.errors]) from error
    errors = []
    for arm in experiment.arms:
        try:
            arm_config(experiment, arm, experiment.seeds[0])
        except ConfigError as error:
            errors += [FieldError(_where(e.field, f"arms.{arm}"), e.message) for e in error.errors]
    if errors:
        raise ConfigError(errors)


def _where(path: str, prefix: str) -> str:
    """A config field's path as the experiment names it: an experiment field, or the field under `prefix`."""
    if path in EXPERIMENT_FIELDS:
        return EXPERIMENT_FIELDS[path]
    return f"{prefix}.{path}" if prefix and path else prefix or path


# -- the runs ---------------------------------------------------------------------------------------------------


def _eval_overrides(experiment: Experiment, seed: int) -> dict[str, Any]:
    spec = experiment.evaluation
    return {
        "seed": seed,
        "eval.benchmarks": list(spec.benchmarks),
        "eval.split": spec.split,
        "eval.eval_samples": spec.size,
        "eval.sample_seed": spec.sample_seed,
    }


def arm_config(experiment: Experiment, arm: str, seed: int) -> RunConfig:
    """The config of one run: the preset, the experiment's overrides, the arm's, the seed and the evaluation (the
    run's end evaluates I* on it). A random-pool arm whose optimizer needs a key draws its pool with `rules`."""
    if arm not in experiment.arms:
        raise ConfigError([FieldError("arm", f"unknown arm {arm!r}; the experiment has {', '.join(experiment.arms)}")])
    config = preset(experiment.preset).with_overrides(
        {**experiment.overrides, **experiment.arms[arm], **_eval_overrides(experiment, seed)}
    )
    if config.mode == "random-pool" and config.optimizer.provider not in KEYLESS_PROVIDERS:
        config = config.with_overrides(
            {"optimizer.provider": "rules", "optimizer.base_url": None, "optimizer.endpoint": None}
            | {"optimizer.team_secret": None}
        )
    return config


def run_name(arm: str, seed: int) -> str:
    """A run's directory name inside the experiment's directory."""
    return f"{arm}-s{seed}"


@dataclass(frozen=True)
class RunOutcome:
    """What an experiment reads back from one run directory."""

    finished: bool
    steps: int
    """The last step the run completed."""
    rewards: list[float]
    """Training reward (step mean) of steps 1, 2, …; a resumed run's repeated steps keep their last value."""
    em: dict[str, dict[str, float]] = field(default_factory=dict)
    """Benchmark → question id → EM of the final evaluation (empty unless finished)."""
    f1: dict[str, dict[str, float]] = field(default_factory=dict)
    machine: dict[str, str] | None = None
    """What the run's last start recorded it computed on (`machine.describe`); None if it recorded nothing."""
    minutes: float | None = None
    """Wall time of its training process, summed over its starts (a resume's wait between them not counted)."""
    peak_rss_kib: int | None = None
    """The highest resident-set peak a start of it recorded at its end; None if none recorded one."""
    precision: str | None = None
    """What its last start computed in ('fp32', 'bf16-mixed': `backend.precision` resolved); None if not recorded."""


def read_run(run_dir: Path, benchmarks: str | Sequence[str]) -> RunOutcome:
    """A run directory's progress, training rewards and, when it finished, its final evaluation's answers on each
    benchmark (finished only when every benchmark's are there)."""
    events_path = run_dir / "events.jsonl"
    if not events_path.exists():
        return RunOutcome(False, 0, [])
    events = read_events(events_path)
    steps = {e.step: e.reward_mean for e in events if isinstance(e, StepCompleted)}
    rewards = [steps[s] for s in sorted(steps)]
    ends = [e for e in events if isinstance(e, RunFinished)]
    last = max(steps, default=0)
    start = next((e for e in reversed(events) if isinstance(e, RunStarted)), None)
    peaks = [e.peak_rss_kib for e in ends if e.peak_rss_kib]
    unfinished = RunOutcome(
        False,
        last,
        rewards,
        machine=(start.machine or None) if start else None,
        minutes=_minutes(events),
        peak_rss_kib=max(peaks, default=None),
        precision=(start.precision or None) if start else None,
    )
    if not ends or ends[-1].status != "finished":
        return unfinished
    names = [benchmarks] if isinstance(benchmarks, str) else list(benchmarks)
    paths = {name: evaluation_file_found(run_dir, ends[-1].step, name) for name in names}
    if not all(path.exists() for path in paths.values()):
        return unfinished
    answers = {name: read_answers(path) for name, path in paths.items()}
    em = {name: {str(a["question_id"]): float(a["em"]) for a in rows} for name, rows in answers.items()}
    f1 = {name: {str(a["question_id"]): float(a["f1"]) for a in rows} for name, rows in answers.items()}
    return replace(unfinished, finished=True, em=em, f1=f1)


def _minutes(events: Sequence[Event]) -> float | None:
    """Minutes from each RunStarted to the last event before the next one, summed; None without a start."""
    starts = [i for i, e in enumerate(events) if isinstance(e, RunStarted)]
    if not starts:
        return None
    ends = [*starts[1:], len(events)]
    return sum(events[end - 1].time - events[start].time for start, end in zip(starts, ends, strict=True)) / 60


def read_experiment(experiment: Experiment, out: Path) -> dict[str, Any]:
    """`experiment_results` over the runs found under `out` (each in `run_name(arm, seed)`)."""
    scores: dict[str, dict[str, dict[int, dict[str, float]]]] = {arm: {} for arm in experiment.arms}
    f1s: dict[str, dict[str, dict[int, dict[str, float]]]] = {arm: {} for arm in experiment.arms}
    rewards: dict[str, dict[int, list[float]]] = {arm: {} for arm in experiment.arms}
    machines: dict[str, dict[str, str] | None] = {}
    costs: list[dict[str, Any]] = []
    for arm, seed in experiment.runs():
        outcome = read_run(out / run_name(arm, seed), experiment.evaluation.benchmarks)
        if outcome.rewards:
            rewards[arm][seed] = outcome.rewards
            machines[run_name(arm, seed)] = outcome.machine
            costs.append(
                {"arm": arm, "seed": seed, "finished": outcome.finished, "steps": outcome.steps}
                | {"minutes": outcome.minutes, "peak_rss_kib": outcome.peak_rss_kib, "precision": outcome.precision}
            )
        for name in outcome.em if outcome.finished else ():
            scores[arm].setdefault(name, {})[seed] = outcome.em[name]
            f1s[arm].setdefault(name, {})[seed] = outcome.f1[name]
    results = experiment_results(experiment, scores, rewards, f1_by_arm=f1s, machines=machines)
    return results | {"runs": costs}


# -- results ----------------------------------------------------------------------------------------------------


def experiment_results(
    experiment: Experiment,
    scores_by_arm: Mapping[str, BenchmarkScores],
    rewards_by_arm: Mapping[str, Mapping[int, SeedRewards]],
    *,
    f1_by_arm: Mapping[str, BenchmarkScores] | None = None,
    level: float = 0.95,
    machines: dict[str, dict[str, str] | None] | None = None,
) -> dict[str, Any]:
    """The experiment's table as JSON-able data: per arm its finished seeds, mean EM (and F1), the training reward
    of the last steps and its curve over seeds, its difference from the baseline arm with an interval and the verdict
    in words; and which (arm, seed) runs have no results. An arm is computed over the seeds that finished; it is
    compared with the baseline on the seeds both finished. `scores_by_arm`: arm → benchmark → seed → question id →
    EM (0–1); `rewards_by_arm`: arm → seed → training reward per step. `machines` (run name → what it recorded
    computing on, None for nothing) adds the runs grouped by machine: arms pair by seed, and runs of one seed on
    different machines computed different things from their first step.

    Each arm's `benchmarks` holds one entry per benchmark (its means, comparison and verdict). The arm's own numbers
    are those of the unweighted average over the benchmarks (each weighted 1/B, `stats.compare_average`), over the
    seeds that finished every benchmark; with one benchmark they are that benchmark's."""
    names = list(experiment.evaluation.benchmarks)
    missing = [
        {"arm": arm, "seed": seed}
        for arm, seed in experiment.runs()
        if seed not in _finished(scores_by_arm.get(arm, {}), names)
    ]
    baseline = scores_by_arm.get(experiment.baseline, {})
    rows = [
        _arm_row(
            experiment,
            arm,
            (scores_by_arm.get(arm, {}), (f1_by_arm or {}).get(arm, {}), baseline),
            rewards_by_arm.get(arm, {}),
            level,
        )
        for arm in experiment.arms
    ]
    return {
        "experiment": experiment.to_dict(),
        "baseline": experiment.baseline,
        "level": level,
        "benchmarks": names,
        "arms": rows,
        "missing": missing,
        "complete": not missing,
        **machines_summary(machines or {}),
    }


def machines_summary(machines: Mapping[str, dict[str, str] | None]) -> dict[str, Any]:
    """`machines`: the runs grouped by what they recorded computing on (`machine`: the record, `described`: it in
    words, `runs`: their names), and `machines_warning`: why that matters, when there is more than one group.

    >>> machines_summary({"static-s0": {"cpu": "x"}, "inspo-s0": {"cpu": "x"}})["machines"]
    [{'machine': {'cpu': 'x'}, 'described': 'cpu x', 'runs': ['static-s0', 'inspo-s0']}]
    """
    groups = same_machine_groups(dict(machines))
    return {
        "machines": [{"machine": machine, "described": described(machine), "runs": names} for machine, names in groups],
        "machines_warning": machines_warning(len(groups)) if len(groups) > 1 else None,
    }


def machines_warning(count: int) -> str:
    """What runs of one experiment on `count` kinds of machine mean for its verdicts."""
    return (
        f"The runs computed on {count} different machines. Arms are paired by seed, but runs of one seed on "
        "different machines sample differently from their first step, so such pairs are no closer than unpaired "
        "draws: rerun a control arm on the machine of the others before reading a difference."
    )


def _finished(scores: BenchmarkScores, names: Sequence[str]) -> list[int]:
    """The seeds with scores on every one of the benchmarks."""
    by_benchmark = [{seed for seed, by_question in scores.get(name, {}).items() if by_question} for name in names]
    return sorted(set.intersection(*by_benchmark)) if by_benchmark else []


def _arm_row(
    experiment: Experiment,
    arm: str,
    scores: tuple[BenchmarkScores, BenchmarkScores, BenchmarkScores],
    rewards: Mapping[int, SeedRewards],
    level: float,
) -> dict[str, Any]:
    """One arm's row; `scores` holds its EM, its F1 and the baseline arm's EM, each benchmark → seed → question."""
    em, f1, baseline = scores
    names = list(experiment.evaluation.benchmarks)
    finished = _finished(em, names)
    row: dict[str, Any] = {
        "arm": arm,
        "overrides": experiment.arms[arm],
        "seeds": finished,
        **_average_summary(arm, {name: em.get(name, {}) for name in names}, finished),
        "mean_f1": _mean_f1({name: f1.get(name, {}) for name in names}, finished),
        "reward_last": _reward_tail({s: rewards[s] for s in finished if s in rewards}),
        "reward_curve": reward_curve(rewards),
        "comparison": None,
        "verdict": None,
        "benchmarks": [
            _benchmark_row(experiment, arm, name, (em.get(name, {}), f1.get(name, {}), baseline.get(name, {})), level)
            for name in names
        ],
    }
    if arm == experiment.baseline:
        return row
    if len(names) == 1:
        return row | _comparison(arm, em.get(names[0], {}), experiment.baseline, baseline.get(names[0], {}), level)
    return row | _average_comparison(arm, em, experiment.baseline, baseline, names, level)


def _benchmark_row(
    experiment: Experiment, arm: str, name: str, scores: tuple[Scores, Scores, Scores], level: float
) -> dict[str, Any]:
    """One benchmark of an arm: its means over the seeds that finished it, and its own comparison and verdict."""
    em, f1, baseline = scores
    finished = sorted(seed for seed, by_question in em.items() if by_question)
    entry = {
        "benchmark": name,
        "seeds": finished,
        **_average_summary(arm, {name: em}, finished),
        "mean_f1": _mean_f1({name: f1}, finished),
        "comparison": None,
        "verdict": None,
    }
    if arm == experiment.baseline:
        return entry
    done = {s: em[s] for s in finished}
    return entry | _comparison(arm, done, experiment.baseline, baseline, level, scope=name)


def _average_summary(arm: str, scores: BenchmarkScores, seeds: list[int]) -> dict[str, Any]:
    """The mean over `seeds` of each seed's unweighted mean over the benchmarks of its mean score, each seed's, and
    the questions of all the benchmarks (each one's fewest over the seeds)."""
    if not seeds:
        return {"mean_em": None, "per_seed_em": {}, "questions": 0}
    from .stats import arm_summary

    summaries = [arm_summary(arm, {seed: by_seed[seed] for seed in seeds}) for by_seed in scores.values()]
    per_seed = {seed: statistics.fmean(summary.per_seed[seed] for summary in summaries) for seed in seeds}
    return {
        "mean_em": statistics.fmean(per_seed.values()),
        "per_seed_em": {str(s): v for s, v in per_seed.items()},
        "questions": sum(summary.questions for summary in summaries),
    }


def _comparison(
    arm: str, scores: Scores, name: str, baseline: Scores, level: float, *, scope: str = ""
) -> dict[str, Any]:
    """The arm against the baseline on the seeds both finished; a verdict saying why when there is none. `scope`
    names the benchmark in the verdict."""
    where = f" on {scope}" if scope else ""
    common = sorted(set(scores) & set(baseline))
    if not common:
        return {"verdict": f"{arm} − {name}{where}: no seed finished in both arms yet"}
    from .stats import compare

    try:
        result = compare(arm, {s: scores[s] for s in common}, name, {s: baseline[s] for s in common}, level=level)
    except ValueError as error:
        return {"verdict": f"{arm} − {name}{where}: not comparable ({error})"}
    result = replace(result, scope=scope)
    return {"comparison": comparison_dict(result), "verdict": result.verdict()}


def average_scope(benchmarks: int) -> str:
    """How a verdict names the average over the benchmarks.

    >>> average_scope(3)
    'Avg. of 3 benchmarks (each weighted 1/3)'
    """
    return f"Avg. of {benchmarks} benchmarks (each weighted 1/{benchmarks})"


def _average_comparison(
    arm: str, scores: BenchmarkScores, name: str, baseline: BenchmarkScores, names: list[str], level: float
) -> dict[str, Any]:
    """The arm against the baseline on the unweighted average over the benchmarks, on the seeds both finished on
    every benchmark; a verdict saying why when there is none."""
    scope = average_scope(len(names))
    common = sorted(set(_finished(scores, names)) & set(_finished(baseline, names)))
    if not common:
        return {"verdict": f"{arm} − {name} on {scope}: no seed finished every benchmark in both arms yet"}
    from .stats import compare_average

    def on_common(by_benchmark: BenchmarkScores) -> dict[str, dict[int, Mapping[str, float]]]:
        return {b: {s: by_benchmark[b][s] for s in common} for b in names}

    try:
        result = compare_average(arm, on_common(scores), name, on_common(baseline), level=level)
    except ValueError as error:
        return {"verdict": f"{arm} − {name} on {scope}: not comparable ({error})"}
    result = replace(result, scope=scope)
    return {"comparison": comparison_dict(result), "verdict": result.verdict()}


def comparison_dict(result: Comparison) -> dict[str, Any]:
    """A comparison as JSON-able data, with the seeds a 5-point difference would need at its variance."""
    from .stats import no_seeds_needed_reason, seeds_needed

    needed = seeds_needed(result, DETECT, level=result.level)
    return {
        "mean": result.mean,
        "low": result.low,
        "high": result.high,
        "level": result.level,
        "seeds": result.seeds,
        "questions": result.questions,
        "benchmark_questions": dict(result.benchmark_questions),
        "per_seed": {str(s): v for s, v in result.per_seed.items()},
        "method": result.method,
        "excludes_zero": result.excludes_zero(),
        "without_variance": result.without_variance(),
        "seeds_needed": {
            "difference": DETECT,
            "seeds": needed,
            "reason": None if needed is not None else no_seeds_needed_reason(result, DETECT, level=result.level),
        },
    }


def _mean_f1(f1: BenchmarkScores, seeds: list[int]) -> float | None:
    """The mean over the seeds that have F1 on every benchmark of each one's unweighted mean over the benchmarks."""
    kept = [seed for seed in seeds if all(by_seed.get(seed) for by_seed in f1.values())]
    if not kept or not f1:
        return None
    return statistics.fmean(
        statistics.fmean(statistics.fmean(by_seed[seed].values()) for by_seed in f1.values()) for seed in kept
    )


SeedRewards = Sequence[float] | Mapping[int, float]
"""One seed's training reward per step: of steps 1, 2, … in order, or step → reward (a run whose recorded steps do
not start at 1, or have a gap)."""


def _by_step(rewards: SeedRewards) -> dict[int, float]:
    if isinstance(rewards, Mapping):
        return {int(step): float(value) for step, value in rewards.items()}
    return {index + 1: float(value) for index, value in enumerate(rewards)}


def _reward_tail(rewards: Mapping[int, SeedRewards]) -> float | None:
    """The mean over seeds of each run's mean training reward over its last REWARD_TAIL steps."""
    ordered = [[by[s] for s in sorted(by)] for by in map(_by_step, rewards.values())]
    tails = [statistics.fmean(r[-REWARD_TAIL:]) for r in ordered if r]
    return statistics.fmean(tails) if tails else None


def reward_curve(rewards: Mapping[int, SeedRewards]) -> dict[str, list[float]]:
    """Training reward per step over the seeds that reached it: mean, the lowest and highest seed (the band), and
    how many seeds have a reward at that step (a seed counts only at the steps it has recorded).

    >>> reward_curve({0: [0.0, 0.5], 1: [1.0]})
    {'steps': [1, 2], 'mean': [0.5, 0.5], 'low': [0.0, 0.5], 'high': [1.0, 0.5], 'seeds': [2, 1]}
    >>> reward_curve({0: {1: 0.0, 2: 0.5}, 1: {2: 1.0}})["seeds"]
    [1, 2]
    """
    by_seed = [_by_step(r) for r in rewards.values()]
    curve: dict[str, list[float]] = {"steps": [], "mean": [], "low": [], "high": [], "seeds": []}
    for step in sorted({step for by in by_seed for step in by}):
        values = [by[step] for by in by_seed if step in by]
        curve["steps"].append(step)
        curve["mean"].append(statistics.fmean(values))
        curve["low"].append(min(values))
        curve["high"].append(max(values))
        curve["seeds"].append(len(values))
    return curve


def results_markdown(results: Mapping[str, Any]) -> str:
    """`experiment_results` as Markdown: what was run, the table, every verdict in words and the missing runs."""
    spec = results["experiment"]
    evaluation, baseline = spec["evaluation"], results["baseline"]
    names = list(EvalSpec.from_dict(evaluation).benchmarks)
    drawn = f"{evaluation['size']} questions drawn by seed {evaluation['sample_seed']}"
    questions = drawn if evaluation["size"] else "all its questions"
    average = (
        f" The arms' EM, F1 and differences are the unweighted average over the {len(names)} benchmarks (each "
        f"weighted 1/{len(names)}); each benchmark's own follow the table."
        if len(names) > 1
        else ""
    )
    lines = [
        f"# Experiment: {spec['preset']}, seeds {', '.join(map(str, spec['seeds']))}",
        "",
        f"Evaluation: {', '.join(names)}, {evaluation['split']} split, {questions}; each run's best "
        f"instruction I*, greedy. Baseline arm: {baseline}.{average}",
        "",
        f"| arm | seeds | mean EM | mean F1 | reward (last {REWARD_TAIL} steps) | − {baseline} "
        f"[{100 * results['level']:g} % interval], EM points | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    lines += [_markdown_row(row) for row in results["arms"]]
    verdicts = [row["verdict"] for row in results["arms"] if row["verdict"]]
    lines += ["", "Verdicts:", "", *(f"- {verdict}" for verdict in verdicts)] if verdicts else []
    lines += _benchmarks_markdown(results["arms"], names) if len(names) > 1 else []
    methods = {row["comparison"]["method"] for row in results["arms"] if row["comparison"]}
    lines += ["", f"Interval: {'; '.join(sorted(methods))}."] if methods else []
    missing = [f"{m['arm']} seed {m['seed']}" for m in results["missing"]]
    lines += ["", f"Missing runs (no final evaluation yet): {', '.join(missing)}."] if missing else []
    lines += _costs_markdown(results.get("runs", []))
    return "\n".join(lines + _machines_markdown(results.get("machines", []))) + "\n"


def _benchmarks_markdown(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """Table 1: each arm's mean EM per benchmark and their average, then each benchmark's verdicts."""

    def number(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    lines = ["", "| arm | " + " | ".join(names) + " | Avg. |", "|---|" + "---:|" * (len(names) + 1)]
    for row in rows:
        cells = [number(entry["mean_em"]) for entry in row["benchmarks"]] + [number(row["mean_em"])]
        lines.append(f"| {row['arm']} | " + " | ".join(cells) + " |")
    verdicts = [entry["verdict"] for row in rows for entry in row["benchmarks"] if entry["verdict"]]
    return lines + (["", "Per benchmark:", "", *(f"- {verdict}" for verdict in verdicts)] if verdicts else [])


def _costs_markdown(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each run's wall time, resident-set peak and precision, as its events recorded them."""
    if not runs:
        return []
    lines = ["", "| run | steps | minutes | peak RSS, GB | computed in |", "|---|---:|---:|---:|---|"]
    for run in runs:
        minutes = "–" if run["minutes"] is None else f"{run['minutes']:.1f}"
        peak = "–" if not run["peak_rss_kib"] else f"{run['peak_rss_kib'] * 1024 / 1e9:.2f}"
        precision = run.get("precision") or "–"  # results.json written before runs recorded it
        state = "" if run["finished"] else " (unfinished)"
        name = run_name(run["arm"], run["seed"])
        lines.append(f"| {name}{state} | {run['steps']} | {minutes} | {peak} | {precision} |")
    return lines


def _machines_markdown(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """A warning when the runs computed on more than one kind of machine (see `machine`), naming each."""
    if len(groups) < 2:
        return []
    first, rest = machines_warning(len(groups)).split(". ", 1)
    lines = ["", f"**{first}.** {rest}", ""]
    for group in groups:
        lines.append(f"- {described(group['machine'])}: {', '.join(group['runs'])}")
    return lines


def _markdown_row(row: Mapping[str, Any]) -> str:
    def number(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    comparison = row["comparison"]
    if comparison is not None:
        difference = (
            f"{100 * comparison['mean']:+.1f} [{100 * comparison['low']:+.1f}, {100 * comparison['high']:+.1f}]"
        )
        difference += " (no variance)" if comparison.get("without_variance") else ""  # results.json of before
    else:
        difference = "baseline" if row["verdict"] is None else "–"
    verdict = (row["verdict"] or "").rsplit(": ", 1)[-1]
    cells = [row["arm"], str(len(row["seeds"])), number(row["mean_em"]), number(row["mean_f1"])]
    cells += [number(row["reward_last"]), difference, verdict]
    return "| " + " | ".join(cells) + " |"


__all__ = [
    "BUILTIN_ARMS",
    "BUILTIN_ARM_MEANINGS",
    "EVALUATIONS_DIR",
    "MAX_BENCHMARKS",
    "EvalSpec",
    "Experiment",
    "RunOutcome",
    "arm_config",
    "average_scope",
    "experiment_from_dict",
    "experiment_results",
    "read_experiment",
    "read_run",
    "results_markdown",
    "reward_curve",
    "run_name",
]
