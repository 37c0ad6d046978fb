"""Coverage of 95 % intervals for arm − baseline EM over seeds × questions, by simulation; prints Markdown tables.

    .venv/bin/python bench/coverage.py [--simulations 1000] [--only one|several]

The generative model is `inspo_engine.stats.SimulatedExperiments` (the one tests/engine/test_stats.py checks): per
question a difficulty shared by both arms and the arm's own effect on it, per seed a random effect on the arm, and a
Bernoulli EM per (seed, question). A method covers when its interval holds the model's true difference. The first table
compares the candidate methods; the second checks the chosen one over more seed counts and variances.

Then the same for the average over several benchmarks of unequal sizes (`SimulatedBenchmarks`: each benchmark its own
questions, difficulty and effect, one model per seed answering all of them with seed effects correlated across
benchmarks), whose true difference is the unweighted mean of the benchmarks' (the paper's Table 1 average).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inspo_engine.stats import (
    SimulatedBenchmarks,
    SimulatedExperiments,
    benchmark_average_interval,
    normal_quantile,
    pooled_bootstrap_intervals,
    seed_question_interval,
    t_quantile,
)

Bounds = tuple[np.ndarray, np.ndarray]
SEED_SD = {"small": 0.03, "large": 0.4}


def pooled_bootstrap(d: np.ndarray, rng: np.random.Generator) -> Bounds:
    return pooled_bootstrap_intervals(d, rng)


def two_level_bootstrap(d: np.ndarray, rng: np.random.Generator, resamples: int = 1000) -> Bounds:
    """Resample seeds, then questions within each resampled seed (a multinomial draw over the values −1, 0, 1)."""
    experiments, seeds, questions = d.shape
    shares = np.stack([(d == v).mean(axis=2) for v in (-1.0, 0.0, 1.0)], axis=2)  # (experiments, seeds, 3)
    lows, highs = [], []
    for start in range(0, experiments, 100):
        part = shares[start : start + 100]
        picked = rng.integers(0, seeds, size=(resamples, part.shape[0], seeds))
        chosen = np.take_along_axis(part[None], picked[..., None], axis=2)
        counts = rng.multinomial(questions, chosen)
        means = np.sort(((counts[..., 2] - counts[..., 0]) / questions).mean(axis=2), axis=0)
        lows.append(means[int(0.025 * (resamples - 1))])
        highs.append(means[int(0.975 * (resamples - 1))])
    return np.concatenate(lows), np.concatenate(highs)


def per_seed_t(d: np.ndarray, rng: np.random.Generator) -> Bounds:
    """t(S−1) over the per-seed mean differences alone: blind to what the shared questions contribute."""
    seed_means = d.mean(axis=2)
    seeds = seed_means.shape[1]
    half = t_quantile(0.975, seeds - 1) * seed_means.std(axis=1, ddof=1) / np.sqrt(seeds)
    return seed_means.mean(axis=1) - half, seed_means.mean(axis=1) + half


def chosen(d: np.ndarray, rng: np.random.Generator) -> Bounds:
    interval = seed_question_interval(d)
    return interval.low, interval.high


METHODS: dict[str, Callable[[np.ndarray, np.random.Generator], Bounds]] = {
    "pooled question bootstrap (`paired_bootstrap`, one level)": pooled_bootstrap,
    "two-level bootstrap (seeds, then questions in each)": two_level_bootstrap,
    "t(S−1) over per-seed differences only": per_seed_t,
    "**per-seed t + shared-question variance (used)**": chosen,
}


def coverage(
    model: SimulatedExperiments, seeds: int, method: Callable[[np.ndarray, np.random.Generator], Bounds], sims: int
) -> tuple[float, float]:
    rng = np.random.default_rng([seeds, int(1000 * model.seed_sd), int(1000 * model.question_effect_sd)])
    low, high = method(model.draw(rng, sims, seeds), rng)
    truth = model.true_difference()
    return float(np.mean((low <= truth) & (truth <= high))), float(100 * np.mean(high - low))


def methods_table(sims: int) -> list[str]:
    columns = [(seeds, size) for seeds in (3, 10) for size in SEED_SD]
    head = "| method | " + " | ".join(f"{seeds} seeds, {size} seed var." for seeds, size in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    for name, method in METHODS.items():
        cells = []
        for seeds, size in columns:
            covered, width = coverage(SimulatedExperiments(seed_sd=SEED_SD[size]), seeds, method, sims)
            cells.append(f"{covered:.3f} ({width:.1f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def robustness_table(sims: int) -> list[str]:
    seed_counts = (2, 3, 5, 10)
    lines = [
        "| seed SD (logit) | arm×question SD (logit) | per-seed SD from seeds / from questions (EM pts) | "
        + " | ".join(f"{s} seeds" for s in seed_counts)
        + " |",
        "|---" * (len(seed_counts) + 3) + "|",
    ]
    for seed_sd in (0.03, 0.2, 0.4, 0.8):
        for question_effect_sd in (0.0, 0.5, 1.0):
            model = SimulatedExperiments(seed_sd=seed_sd, question_effect_sd=question_effect_sd)
            cells = [f"{c:.3f} ({w:.1f})" for c, w in (coverage(model, s, chosen, sims) for s in seed_counts)]
            from_seeds, from_questions = spread(model)
            lines.append(
                f"| {seed_sd} | {question_effect_sd} | {from_seeds:.1f} / {from_questions:.1f} | "
                + " | ".join(cells)
                + " |"
            )
    return lines


def spread(model: SimulatedExperiments) -> tuple[float, float]:
    """SD of one seed's mean difference due to the seed effect, and due to its questions' answers (EM points)."""
    d = model.draw(np.random.default_rng(7), 2000, 8)
    within = d.var(axis=2, ddof=1).mean() / model.questions
    total = d.mean(axis=2).var(axis=1, ddof=1).mean()
    return 100 * float(np.sqrt(max(total - within, 0.0))), 100 * float(np.sqrt(within))


# -- several benchmarks ----------------------------------------------------------------------------------------------

BENCHMARKS = {
    "125 + 500": ((125, -2.0, 0.1), (500, -1.0, 0.3)),
    "125 + 500 + 250": ((125, -2.0, 0.1), (500, -1.0, 0.3), (250, -0.5, -0.1)),
}
"""Benchmarks of unequal sizes, each (questions, difficulty mean on the logit scale, the arm's effect): baseline EM
about 0.19, 0.33 and 0.41, true differences about +1.8, +5.2 and −1.5 EM points (a little more with a large seed SD),
so the question-weighted mean is not the unweighted one."""
MultiMethod = Callable[[list[np.ndarray]], Bounds]


def benchmarks_model(name: str, seed_sd: float, correlation: float) -> SimulatedBenchmarks:
    return SimulatedBenchmarks(
        tuple(
            SimulatedExperiments(seed_sd=seed_sd, questions=q, difficulty_mean=mean, effect=effect)
            for q, mean, effect in BENCHMARKS[name]
        ),
        seed_correlation=correlation,
    )


def average_used(ds: list[np.ndarray]) -> Bounds:
    interval = benchmark_average_interval(ds)
    return interval.low, interval.high


def pooled_questions(ds: list[np.ndarray]) -> Bounds:
    """Every benchmark's questions as one benchmark: each question weighs the same, so the largest benchmark most."""
    interval = seed_question_interval(np.concatenate(ds, axis=-1))
    return interval.low, interval.high


def independent_benchmarks(ds: list[np.ndarray]) -> Bounds:
    """Each benchmark's two parts summed with weights (1/B)², as if its seed effects were independent of the others'."""
    parts = [seed_question_interval(d) for d in ds]
    weight, seeds = 1 / len(ds), ds[0].shape[1]
    seed_part = weight**2 * sum(p.seed_part for p in parts)
    question_part = weight**2 * sum(p.question_part for p in parts)
    mean = weight * sum(p.mean for p in parts)
    half = np.sqrt(t_quantile(0.975, seeds - 1) ** 2 * seed_part + normal_quantile(0.975) ** 2 * question_part)
    return mean - half, mean + half


def average_t_only(ds: list[np.ndarray]) -> Bounds:
    """t(S−1) over the per-seed differences of the average alone: blind to the shared questions."""
    seed_means = sum(d.mean(axis=2) for d in ds) / len(ds)
    seeds = seed_means.shape[1]
    half = t_quantile(0.975, seeds - 1) * seed_means.std(axis=1, ddof=1) / np.sqrt(seeds)
    return seed_means.mean(axis=1) - half, seed_means.mean(axis=1) + half


MULTI_METHODS: dict[str, MultiMethod] = {
    "all questions pooled as one benchmark (each question weighted equally)": pooled_questions,
    "benchmarks as independent (per-benchmark seed parts summed)": independent_benchmarks,
    "t(S−1) over per-seed differences of the average only": average_t_only,
    "**per-seed t of the average + Σ (1/B)² × shared-question variance (used)**": average_used,
}


def average_coverage(model: SimulatedBenchmarks, seeds: int, method: MultiMethod, sims: int) -> tuple[float, float]:
    sizes = sum(b.questions for b in model.benchmarks)
    rng = np.random.default_rng(
        [seeds, sizes, int(1000 * model.benchmarks[0].seed_sd), int(10 * model.seed_correlation)]
    )
    low, high = method(model.draw(rng, sims, seeds))
    truth = model.true_difference()
    return float(np.mean((low <= truth) & (truth <= high))), float(100 * np.mean(high - low))


def average_methods_table(sims: int) -> list[str]:
    columns = [(seeds, size) for seeds in (3, 10) for size in SEED_SD]
    head = "| method | " + " | ".join(f"{seeds} seeds, {size} seed var." for seeds, size in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    for name, method in MULTI_METHODS.items():
        cells = []
        for seeds, size in columns:
            model = benchmarks_model("125 + 500", SEED_SD[size], 1.0)
            cells.append("{:.3f} ({:.1f})".format(*average_coverage(model, seeds, method, sims)))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def average_robustness_table(sims: int) -> list[str]:
    seed_counts = (2, 3, 5, 10)
    lines = [
        "| benchmarks (questions) | seed SD (logit) | seed correlation across benchmarks | "
        + " | ".join(f"{s} seeds" for s in seed_counts)
        + " |",
        "|---" * (len(seed_counts) + 3) + "|",
    ]
    for name in BENCHMARKS:
        for seed_sd in (0.03, 0.2, 0.4):
            for correlation in (0.0, 0.5, 1.0):
                model = benchmarks_model(name, seed_sd, correlation)
                cells = [average_coverage(model, s, average_used, sims) for s in seed_counts]
                text = " | ".join(f"{c:.3f} ({w:.1f})" for c, w in cells)
                lines.append(f"| {name} | {seed_sd} | {correlation} | {text} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", type=int, default=1000, help="simulated experiments per cell")
    parser.add_argument("--only", choices=("one", "several"), help="one benchmark's tables, or the average's")
    args = parser.parse_args()
    start = time.perf_counter()
    z = normal_quantile(0.975)
    margin = z * np.sqrt(0.95 * 0.05 / args.simulations)
    print(f"Coverage of the true difference by 95 % intervals, {args.simulations} simulated experiments per cell")
    print(f"(Monte-Carlo 95 % margin ±{margin:.3f}); in brackets the mean interval width in EM points.\n")
    if args.only != "several":
        print("\n".join(methods_table(args.simulations)))
        print("\nThe method used, over more seed counts and variances (coverage, mean width in EM points):\n")
        print("\n".join(robustness_table(args.simulations)))
    if args.only != "one":
        print("\nThe average over benchmarks of 125 and 500 questions, seed effects shared (correlation 1):\n")
        print("\n".join(average_methods_table(args.simulations)))
        print("\nThe average's interval over more benchmarks, seed counts, variances and correlations:\n")
        print("\n".join(average_robustness_table(args.simulations)))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
