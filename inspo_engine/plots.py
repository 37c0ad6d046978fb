"""Pictures of a run directory: the four panels of the paper's Fig. 2 and the population's weights over steps, as PNG
files written beside the events they are drawn from; knows events, not models or the web app.

    python -m inspo_engine plot RUN_DIR      (train also calls it when a run ends)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import Event, PopulationChanged, StepCompleted, read_events

FIG2_FILE = "fig2.png"
POPULATION_FILE = "population.png"
EXPERIMENT_REWARD_FILE = "reward.png"
EXPERIMENT_EM_FILE = "em.png"


@dataclass
class RunSeries:
    """Per-step values read from a run's events: Fig. 2's four series, protocol metrics and every member's weight."""

    steps: list[int] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    tool_calls: list[float] = field(default_factory=list)
    instruction_length: list[float] = field(default_factory=list)
    response_length: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    em: list[float] = field(default_factory=list)
    weights: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    """Instruction id → (step, weight) after each step it was alive."""


def run_series(events: Sequence[Event]) -> RunSeries:
    """The series of `events` (a resumed run's repeated steps keep their last value)."""
    steps: dict[int, StepCompleted] = {}
    weights: dict[str, dict[int, float]] = defaultdict(dict)
    for event in events:
        if isinstance(event, StepCompleted):
            steps[event.step] = event
        elif isinstance(event, PopulationChanged) and event.reason == "step":
            for member in event.members:
                weights[member.id][event.step] = member.weight
    series = RunSeries()
    for step in sorted(steps):
        event = steps[step]
        series.steps.append(step)
        series.reward.append(event.reward_mean)
        series.tool_calls.append(event.tool_calls_mean)
        series.instruction_length.append(event.instruction_length_mean)
        series.response_length.append(event.response_length_mean)
        series.answered.append(event.metrics.get("answered", float("nan")))
        series.em.append(event.metrics.get("em", float("nan")))
    for instruction_id, by_step in weights.items():
        series.weights[instruction_id] = sorted(by_step.items())
    return series


def plot_run(run_dir: Path, *, title: str | None = None) -> list[Path]:
    """Write fig2.png and population.png into `run_dir` from its events.jsonl; returns the files written."""
    series = run_series(read_events(run_dir / "events.jsonl"))
    if not series.steps:
        raise ValueError(f"{run_dir} has no completed step to plot")
    name = title or run_dir.name
    return [_fig2(series, run_dir / FIG2_FILE, name), _population(series, run_dir / POPULATION_FILE, name)]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt

    return plt


def _fig2(series: RunSeries, path: Path, name: str) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharex=True)
    panels = [
        (axes[0][0], "training reward", series.reward),
        (axes[0][1], "tool calls per trajectory", series.tool_calls),
        (axes[1][0], "instruction length (words)", series.instruction_length),
        (axes[1][1], "response length (tokens)", series.response_length),
    ]
    for axis, label, values in panels:
        axis.plot(series.steps, values, color="#2563eb", marker="o", markersize=2.5, linewidth=1.2)
        axis.set_title(label, fontsize=10)
        axis.grid(alpha=0.3)
    reward_axis = axes[0][0]
    reward_axis.plot(series.steps, series.answered, color="#16a34a", linewidth=1, label="answered (share)")
    reward_axis.plot(series.steps, series.em, color="#dc2626", linewidth=1, label="exact match")
    reward_axis.legend(fontsize=8, loc="upper left")
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.suptitle(f"{name}: the four panels of Fig. 2", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _population(series: RunSeries, path: Path, name: str) -> Path:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(10, 4))
    for instruction_id, points in sorted(series.weights.items()):
        axis.plot([s for s, _ in points], [w for _, w in points], marker="o", markersize=2, label=instruction_id)
    axis.set_xlabel("step")
    axis.set_ylabel("importance weight w")
    axis.set_title(f"{name}: weight of every instruction while it was alive", fontsize=11)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=4, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# -- experiments ----------------------------------------------------------------------------------------------------


def plot_experiment(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """An experiment's two pictures from its results (`experiments.experiment_results`): reward.png, the training
    reward per arm over steps (mean over seeds, band from the lowest to the highest seed), and em.png, each arm's
    mean EM with its seeds, beside its difference from the baseline arm with the interval."""
    arms = [row for row in results["arms"] if row["reward_curve"]["steps"] or row["mean_em"] is not None]
    if not arms:
        raise ValueError("no run of the experiment has completed a step yet")
    return [
        _experiment_reward(arms, out_dir / EXPERIMENT_REWARD_FILE),
        _experiment_em(results, out_dir / EXPERIMENT_EM_FILE),
    ]


def _experiment_reward(arms: list[dict[str, Any]], path: Path) -> Path:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(9, 4.5))
    for row in arms:
        curve = row["reward_curve"]
        (line,) = axis.plot(curve["steps"], curve["mean"], linewidth=1.4, label=row["arm"])
        axis.fill_between(curve["steps"], curve["low"], curve["high"], color=line.get_color(), alpha=0.15)
    axis.set_xlabel("step")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.set_ylabel("training reward")
    axis.set_title("training reward per arm: mean over seeds, band from the lowest to the highest seed", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _experiment_em(results: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    rows = results["arms"]
    names = [row["arm"] for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, row in enumerate(rows):
        seeds = [100 * v for v in row["per_seed_em"].values()]
        if row["mean_em"] is not None:
            left.bar(i, 100 * row["mean_em"], color="#93c5fd")
        left.scatter([i] * len(seeds), seeds, color="#1e3a8a", s=14, zorder=3)
        comparison = row["comparison"]
        if comparison is not None:
            mean, low, high = (100 * comparison[key] for key in ("mean", "low", "high"))
            right.errorbar(i, mean, yerr=[[mean - low], [high - mean]], fmt="o", capsize=5, color="#b91c1c")
    left.set_xticks(range(len(names)), names)
    left.set_ylabel("EM (%)")
    left.set_title("mean EM per arm (dots: seeds)", fontsize=10)
    right.axhline(0, color="#6b7280", linewidth=1)
    right.set_xticks(range(len(names)), names)
    right.set_ylabel("EM points")
    level = 100 * results["level"]
    right.set_title(f"difference from {results['baseline']}, {level:g} % interval", fontsize=10)
    left.set_ylim(bottom=0)
    for axis in (left, right):
        axis.set_xlim(-0.5, len(names) - 0.5)
        axis.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
