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

from .coevolution import EVALUATIONS_DIR, evaluation_file, read_answers
from .config import ConfigError, FieldError, RunConfig, resolve_key
from .events import Event, RunFinished, RunStarted, StepCompleted, read_events
from .machine import same_machine_groups
from .presets import PRESETS, preset

if TYPE_CHECKING:
    from .stats import Comparison, Scores

BUILTIN_ARMS: dict[str, dict[str, Any]] = {
    "static": {"mode": "static"},
    "inspo": {"mode": "online"},
    "no-verify": {"mode": "online", "evolution.verify": False},
    "random-pool": {"mode": "random-pool"},
}
"""The built-in arms and their overrides: `static` trains with the seed instruction only (the Search-R1 baseline),
`inspo` co-evolves the instructions, `no-verify` is INSPO without verification (the prune-and-expand ablation),
`random-pool` samples INSPO's initial population uniformly and never optimises it (diversity alone)."""

KEYLESS_PROVIDERS = ("rules", "local")
"""Optimizers that need no API key; random-pool's initial population comes from one (`rules` unless the run's own
optimizer is one of these)."""

EXPERIMENT_FIELDS = {
    "seed": "seeds",
    "eval.benchmarks": "evaluation.benchmark",
    "eval.split": "evaluation.split",
    "eval.eval_samples": "evaluation.size",
    "eval.sample_seed": "evaluation.sample_seed",
}
"""Config fields an experiment sets itself, and the experiment field that sets each."""

MAX_ARMS = 16
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

    benchmark: str = "builtin"
    """'builtin' or a FlashRAG benchmark (file or directory)."""
    split: str = "test"
    """The benchmark's split."""
    size: int = 0
    """Questions drawn from the split (0 = all)."""
    sample_seed: int = 0
    """The seed that draws them."""


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
        return asdict(self)

    def runs(self) -> list[tuple[str, int]]:
        """Every (arm, seed), seed by seed so that stopping early leaves whole seeds."""
        return [(arm, seed) for seed in self.seeds for arm in self.arms]


# -- validation -------------------------------------------------------------------------------------------------


def experiment_from_dict(data: Any) -> Experiment:
    """An experiment from JSON-like data, validated: ConfigError names each bad field ("preset", "seeds",
    "evaluation.size", "overrides.grpo.lr", "arms.foo.grpo.lr", "baseline").

    `arms` is a list of built-in arm names or an object of name → overrides (null or {} for a built-in as it is;
    a built-in's overrides apply on top of its own). `seeds` is a count (0 … n−1) or a list of seeds.
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
    _check_configs(experiment)
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


def _evaluation(value: Any) -> tuple[EvalSpec, list[FieldError]]:
    if not isinstance(value, Mapping):
        return EvalSpec(), [FieldError("evaluation", "must be an object")]
    errors = [FieldError(f"evaluation.{key}", "unknown field") for key in value if key not in EvalSpec.__annotations__]
    kinds: dict[str, type] = {"benchmark": str, "split": str, "size": int, "sample_seed": int}
    for key, kind in kinds.items():
        item = value.get(key)
        if item is not None and (not isinstance(item, kind) or isinstance(item, bool)):
            errors.append(FieldError(f"evaluation.{key}", f"must be a{'n integer' if kind is int else ' string'}"))
    if errors:
        return EvalSpec(), errors
    return EvalSpec(**{k: v for k, v in value.items() if v is not None}), []


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
        "eval.benchmarks": [spec.benchmark],
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
    em: dict[str, float] = field(default_factory=dict)
    """Question id → EM of the final evaluation (empty unless finished)."""
    f1: dict[str, float] = field(default_factory=dict)
    machine: dict[str, str] | None = None
    """What the run's last start recorded it computed on (`machine.describe`); None if it recorded nothing."""
    minutes: float | None = None
    """Wall time of its training process, summed over its starts (a resume's wait between them not counted)."""
    peak_rss_kib: int | None = None
    """The highest resident-set peak a start of it recorded at its end; None if none recorded one."""
    precision: str | None = None
    """What its last start computed in ('fp32', 'bf16-mixed': `backend.precision` resolved); None if not recorded."""


def read_run(run_dir: Path, benchmark: str) -> RunOutcome:
    """A run directory's progress, training rewards and, when it finished, its final evaluation's answers."""
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
    path = evaluation_file(run_dir, ends[-1].step, benchmark)
    if not path.exists():
        return unfinished
    answers = read_answers(path)
    em = {str(a["question_id"]): float(a["em"]) for a in answers}
    f1 = {str(a["question_id"]): float(a["f1"]) for a in answers}
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
    scores: dict[str, dict[int, dict[str, float]]] = {arm: {} for arm in experiment.arms}
    f1s: dict[str, dict[int, dict[str, float]]] = {arm: {} for arm in experiment.arms}
    rewards: dict[str, dict[int, list[float]]] = {arm: {} for arm in experiment.arms}
    machines: dict[str, dict[str, str] | None] = {}
    costs: list[dict[str, Any]] = []
    for arm, seed in experiment.runs():
        outcome = read_run(out / run_name(arm, seed), experiment.evaluation.benchmark)
        if outcome.rewards:
            rewards[arm][seed] = outcome.rewards
            machines[run_name(arm, seed)] = outcome.machine
            costs.append(
                {"arm": arm, "seed": seed, "finished": outcome.finished, "steps": outcome.steps}
                | {"minutes": outcome.minutes, "peak_rss_kib": outcome.peak_rss_kib, "precision": outcome.precision}
            )
        if outcome.finished:
            scores[arm][seed], f1s[arm][seed] = outcome.em, outcome.f1
    results = experiment_results(experiment, scores, rewards, f1_by_arm=f1s, machines=machines)
    return results | {"runs": costs}


# -- results ----------------------------------------------------------------------------------------------------


def experiment_results(
    experiment: Experiment,
    scores_by_arm: Mapping[str, Scores],
    rewards_by_arm: Mapping[str, Mapping[int, Sequence[float]]],
    *,
    f1_by_arm: Mapping[str, Scores] | None = None,
    level: float = 0.95,
    machines: dict[str, dict[str, str] | None] | None = None,
) -> dict[str, Any]:
    """The experiment's table as JSON-able data: per arm its finished seeds, mean EM (and F1), the training reward
    of the last steps and its curve over seeds, its difference from the baseline arm with an interval and the verdict
    in words; and which (arm, seed) runs have no results. An arm is computed over the seeds that finished; it is
    compared with the baseline on the seeds both finished. `scores_by_arm`: arm → seed → question id → EM (0–1);
    `rewards_by_arm`: arm → seed → training reward per step. `machines` (run name → what it recorded computing on,
    None for nothing) adds the runs grouped by machine: arms pair by seed, and runs of one seed on different
    machines computed different things from their first step."""
    missing = [{"arm": arm, "seed": seed} for arm, seed in experiment.runs() if seed not in scores_by_arm.get(arm, {})]
    baseline = scores_by_arm.get(experiment.baseline, {})
    rows = [
        _arm_row(experiment, arm, scores_by_arm.get(arm, {}), baseline, rewards_by_arm.get(arm, {}), level)
        | {"mean_f1": _mean_f1((f1_by_arm or {}).get(arm, {}))}
        for arm in experiment.arms
    ]
    return {
        "experiment": experiment.to_dict(),
        "baseline": experiment.baseline,
        "level": level,
        "arms": rows,
        "missing": missing,
        "complete": not missing,
        "machines": [
            {"machine": machine, "runs": names} for machine, names in same_machine_groups(dict(machines or {}))
        ],
    }


def _arm_row(
    experiment: Experiment,
    arm: str,
    scores: Scores,
    baseline: Scores,
    rewards: Mapping[int, Sequence[float]],
    level: float,
) -> dict[str, Any]:
    finished = sorted(scores)
    row: dict[str, Any] = {
        "arm": arm,
        "overrides": experiment.arms[arm],
        "seeds": finished,
        "mean_em": None,
        "per_seed_em": {},
        "questions": 0,
        "reward_last": _reward_tail({s: rewards[s] for s in finished if s in rewards}),
        "reward_curve": reward_curve(rewards),
        "comparison": None,
        "verdict": None,
    }
    if finished:
        from .stats import arm_summary

        summary = arm_summary(arm, scores)
        row |= {
            "mean_em": summary.mean,
            "per_seed_em": {str(s): v for s, v in summary.per_seed.items()},
            "questions": summary.questions,
        }
    if arm != experiment.baseline:
        row |= _comparison(arm, scores, experiment.baseline, baseline, level)
    return row


def _comparison(arm: str, scores: Scores, name: str, baseline: Scores, level: float) -> dict[str, Any]:
    """The arm against the baseline on the seeds both finished; a verdict saying why when there is none."""
    common = sorted(set(scores) & set(baseline))
    if not common:
        return {"verdict": f"{arm} − {name}: no seed finished in both arms yet"}
    from .stats import compare

    try:
        result = compare(arm, {s: scores[s] for s in common}, name, {s: baseline[s] for s in common}, level=level)
    except ValueError as error:
        return {"verdict": f"{arm} − {name}: not comparable ({error})"}
    return {"comparison": comparison_dict(result), "verdict": result.verdict()}


def comparison_dict(result: Comparison) -> dict[str, Any]:
    """A comparison as JSON-able data, with the seeds a 5-point difference would need at its variance."""
    from .stats import seeds_needed

    return {
        "mean": result.mean,
        "low": result.low,
        "high": result.high,
        "level": result.level,
        "seeds": result.seeds,
        "questions": result.questions,
        "per_seed": {str(s): v for s, v in result.per_seed.items()},
        "method": result.method,
        "excludes_zero": result.excludes_zero(),
        "seeds_needed": {"difference": DETECT, "seeds": seeds_needed(result, DETECT, level=result.level)},
    }


def _mean_f1(f1: Scores) -> float | None:
    per_seed = [statistics.fmean(values.values()) for values in f1.values() if values]
    return statistics.fmean(per_seed) if per_seed else None


def _reward_tail(rewards: Mapping[int, Sequence[float]]) -> float | None:
    """The mean over seeds of each run's mean training reward over its last REWARD_TAIL steps."""
    tails = [statistics.fmean(r[-REWARD_TAIL:]) for r in rewards.values() if r]
    return statistics.fmean(tails) if tails else None


def reward_curve(rewards: Mapping[int, Sequence[float]]) -> dict[str, list[float]]:
    """Training reward per step over the seeds that reached it: mean, and the lowest and highest seed (the band).

    >>> reward_curve({0: [0.0, 0.5], 1: [1.0]})
    {'steps': [1, 2], 'mean': [0.5, 0.5], 'low': [0.0, 0.5], 'high': [1.0, 0.5], 'seeds': [2, 1]}
    """
    longest = max((len(r) for r in rewards.values()), default=0)
    curve: dict[str, list[float]] = {"steps": [], "mean": [], "low": [], "high": [], "seeds": []}
    for index in range(longest):
        values = [r[index] for r in rewards.values() if len(r) > index]
        curve["steps"].append(index + 1)
        curve["mean"].append(statistics.fmean(values))
        curve["low"].append(min(values))
        curve["high"].append(max(values))
        curve["seeds"].append(len(values))
    return curve


def results_markdown(results: Mapping[str, Any]) -> str:
    """`experiment_results` as Markdown: what was run, the table, every verdict in words and the missing runs."""
    spec = results["experiment"]
    evaluation, baseline = spec["evaluation"], results["baseline"]
    drawn = f"{evaluation['size']} questions drawn by seed {evaluation['sample_seed']}"
    questions = drawn if evaluation["size"] else "all its questions"
    lines = [
        f"# Experiment: {spec['preset']}, seeds {', '.join(map(str, spec['seeds']))}",
        "",
        f"Evaluation: {evaluation['benchmark']}, {evaluation['split']} split, {questions}; each run's best "
        "instruction I*, greedy. Baseline arm: " + baseline + ".",
        "",
        f"| arm | seeds | mean EM | mean F1 | reward (last {REWARD_TAIL} steps) | − {baseline} "
        f"[{100 * results['level']:g} % interval], EM points | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    lines += [_markdown_row(row) for row in results["arms"]]
    verdicts = [row["verdict"] for row in results["arms"] if row["verdict"]]
    lines += ["", "Verdicts:", "", *(f"- {verdict}" for verdict in verdicts)] if verdicts else []
    methods = {row["comparison"]["method"] for row in results["arms"] if row["comparison"]}
    lines += ["", f"Interval: {'; '.join(sorted(methods))}."] if methods else []
    missing = [f"{m['arm']} seed {m['seed']}" for m in results["missing"]]
    lines += ["", f"Missing runs (no final evaluation yet): {', '.join(missing)}."] if missing else []
    lines += _costs_markdown(results.get("runs", []))
    return "\n".join(lines + _machines_markdown(results.get("machines", []))) + "\n"


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
    lines = [
        "",
        f"**The runs computed on {len(groups)} different machines.** Arms are paired by seed, but runs of one seed "
        "on different machines sample differently from their first step, so such pairs are no closer than "
        "unpaired draws: rerun a control arm on the machine of the others before reading a difference.",
        "",
    ]
    for group in groups:
        machine = group["machine"]
        described = ", ".join(f"{key} {value}" for key, value in machine.items()) if machine else "not recorded"
        lines.append(f"- {described}: {', '.join(group['runs'])}")
    return lines


def _markdown_row(row: Mapping[str, Any]) -> str:
    def number(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    comparison = row["comparison"]
    if comparison is not None:
        difference = (
            f"{100 * comparison['mean']:+.1f} [{100 * comparison['low']:+.1f}, {100 * comparison['high']:+.1f}]"
        )
    else:
        difference = "baseline" if row["verdict"] is None else "–"
    verdict = (row["verdict"] or "").rsplit(": ", 1)[-1]
    cells = [row["arm"], str(len(row["seeds"])), number(row["mean_em"]), number(row["mean_f1"])]
    cells += [number(row["reward_last"]), difference, verdict]
    return "| " + " | ".join(cells) + " |"


__all__ = [
    "BUILTIN_ARMS",
    "EVALUATIONS_DIR",
    "EvalSpec",
    "Experiment",
    "RunOutcome",
    "arm_config",
    "experiment_from_dict",
    "experiment_results",
    "read_experiment",
    "read_run",
    "results_markdown",
    "reward_curve",
    "run_name",
]
