"""The statistics of experiments: hand-computed intervals, pairing, verdicts, bad input, seed counts, and the coverage
simulation that chose the interval (and shows the pooled one-level bootstrap failing when seeds vary)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from inspo_engine.stats import (
    AVERAGE_T,
    QUESTIONS_T,
    SEEDS_T,
    Comparison,
    SimulatedBenchmarks,
    SimulatedExperiments,
    arm_summary,
    benchmark_average_interval,
    compare,
    compare_average,
    no_seeds_needed_reason,
    paired_bootstrap,
    pooled_bootstrap_intervals,
    seed_question_interval,
    seeds_needed,
    t_quantile,
)

Z975 = statistics.NormalDist().inv_cdf(0.975)
SIMULATIONS = 1000
SMALL_SEED_SD, LARGE_SEED_SD = 0.03, 0.4  # logit: per-seed SD ≈ 0.3 and ≈ 4.8 EM points, vs ≈ 3.5 from questions


def scores_of(rows: list[list[float]], first_seed: int = 0) -> dict[int, dict[str, float]]:
    return {first_seed + s: {f"q{i}": v for i, v in enumerate(row)} for s, row in enumerate(rows)}


# ---------------------------------------------------------------------------------------------------------------------
# Hand-computed cases


def test_t_quantiles_match_their_closed_forms_for_one_and_two_degrees_of_freedom() -> None:
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        two_tailed = 2 * (1 - p)
        assert t_quantile(p, 2) == pytest.approx(math.sqrt(2 / (two_tailed * (2 - two_tailed)) - 2), rel=1e-9)
        assert t_quantile(1 - p, 2) == pytest.approx(-t_quantile(p, 2))


@pytest.mark.slow
def test_t_quantiles_match_scipy_across_degrees_of_freedom() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in [*range(1, 31), 99, 199, 1999, 2001, 100_000]:
        for p in (0.6, 0.9, 0.975, 0.9975):
            assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-7), (p, df)


def test_the_interval_of_two_seeds_by_three_questions_adds_the_shared_question_part_by_hand() -> None:
    arm = scores_of([[1, 1, 0], [1, 0, 0]])
    base = scores_of([[0, 1, 0], [0, 0, 1]])
    # d = [[1, 0, 0], [1, 0, −1]]: per-seed means ⅓ and 0, question means 1, 0, −½, grand mean ⅙.
    # var(per-seed means) = 1/18 → seed part 1/36; MS_q = 2·[(⅚)² + (⅙)² + (⅔)²]/2 = 7/6;
    # residuals ±⅙ (four) and ±⅓ (two) → SS_e = ⅓ over 2 df → MS_e = ⅙; question part (7/6 − ⅙)/6 = ⅙.
    half = math.sqrt(math.tan(math.pi * 0.475) ** 2 / 36 + Z975**2 / 6)
    iv = seed_question_interval([[1, 0, 0], [1, 0, -1]])
    assert (float(iv.low), float(iv.high)) == (pytest.approx(1 / 6 - half), pytest.approx(1 / 6 + half))
    c = compare("inspo", arm, "static", base)
    assert c.mean == pytest.approx(1 / 6)
    assert (c.low, c.high) == (-1.0, 1.0)  # clipped: no EM difference lies outside [−1, 1]
    assert (c.seed_part, c.question_part) == (pytest.approx(1 / 36), pytest.approx(1 / 6))
    assert c.per_seed == {0: pytest.approx(1 / 3), 1: 0.0}
    assert (c.seeds, c.questions, c.method) == (2, 3, SEEDS_T)


def test_with_one_seed_the_interval_is_a_t_interval_over_questions() -> None:
    # d = [1, 0, −1]: mean 0, sample variance 1, so half-width t(2)·√(1/3) ≈ 2.48 (compare clips it to [−1, 1]).
    iv = seed_question_interval([[1, 0, -1]])
    assert (float(iv.low), float(iv.high)) == (pytest.approx(-4.302653 / 3**0.5), pytest.approx(4.302653 / 3**0.5))
    assert (float(iv.seed_part), float(iv.question_part)) == (0.0, pytest.approx(1 / 3))
    c = compare("inspo", scores_of([[1, 0, 0]]), "static", scores_of([[0, 0, 1]]))
    assert (c.low, c.high, c.seeds, c.method) == (-1.0, 1.0, 1, QUESTIONS_T)
    assert "one seed" in c.verdict()


def test_it_takes_numpy_numbers_as_seeds_and_scores() -> None:
    arm = {np.int64(0): {"a": np.float64(1.0), "b": np.int64(0)}, np.int64(1): {"a": 1.0, "b": 1.0}}
    c = compare("inspo", arm, "static", {0: {"a": 0.0, "b": 0.0}, 1: {"a": 0.0, "b": 1.0}})
    assert (c.seeds, c.mean) == (2, 0.5)


def test_a_wider_level_gives_a_wider_interval() -> None:
    arm = scores_of([[1, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 1]])
    base = scores_of([[0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 0]])
    narrow, wide = compare("a", arm, "b", base, level=0.8), compare("a", arm, "b", base, level=0.99)
    assert wide.low < narrow.low < narrow.mean < narrow.high < wide.high
    assert (narrow.level, wide.level) == (0.8, 0.99)


# ---------------------------------------------------------------------------------------------------------------------
# The average over benchmarks


def test_the_average_of_one_benchmark_is_that_benchmarks_interval() -> None:
    d = SimulatedExperiments(seed_sd=LARGE_SEED_SD, questions=50).draw(np.random.default_rng(1), 20, 3)
    one, average = seed_question_interval(d), benchmark_average_interval([d])
    for field in ("mean", "low", "high", "seed_part", "question_part"):
        assert np.allclose(getattr(one, field), getattr(average, field)), field


def test_the_average_weighs_each_benchmark_equally_whatever_its_questions_by_hand() -> None:
    small = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])  # per-seed 1, ½, ½: mean ⅔
    large = np.array([[0.0] * 8, [0.0] * 7 + [1.0], [1.0] + [0.0] * 7])  # per-seed 0, ⅛, ⅛: mean 1/12
    iv = benchmark_average_interval([small, large])
    assert float(iv.mean) == pytest.approx((2 / 3 + 1 / 12) / 2)  # not the question-weighted (4 + 2) / 30
    per_seed = (small.mean(axis=1) + large.mean(axis=1)) / 2  # ½, 5/16, 5/16
    assert float(iv.seed_part) == pytest.approx(np.var(per_seed, ddof=1) / 3)
    parts = [float(seed_question_interval(d).question_part) for d in (small, large)]
    assert float(iv.question_part) == pytest.approx((parts[0] + parts[1]) / 4)  # Σ (1/B)² × each one's
    half = math.sqrt(4.302653**2 * float(iv.seed_part) + Z975**2 * float(iv.question_part))
    assert float(iv.high - iv.mean) == pytest.approx(half, rel=1e-6)


def test_with_one_seed_the_average_counts_each_benchmarks_questions_with_the_smallest_ones_t() -> None:
    iv = benchmark_average_interval([[[1.0, 0.0, -1.0]], [[1.0, 1.0, 0.0, 0.0, 0.0]]])
    variance = (1 / 3 + 0.3 / 5) / 4  # sample variances 1 and 0.3 over 3 and 5 questions, each weighted ¼
    assert float(iv.question_part) == pytest.approx(variance) and float(iv.seed_part) == 0.0
    assert float(iv.high - iv.mean) == pytest.approx(4.302653 * math.sqrt(variance), rel=1e-6)  # t(3 − 1)


def test_the_average_refuses_benchmarks_on_other_seeds_or_with_one_question() -> None:
    with pytest.raises(ValueError, match="same seeds"):
        benchmark_average_interval([np.zeros((3, 4)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match="2 questions"):
        benchmark_average_interval([np.zeros((3, 4)), np.zeros((3, 1))])
    with pytest.raises(ValueError, match="at least one"):
        benchmark_average_interval([])


def test_compare_average_pairs_on_the_seeds_that_have_every_benchmark_in_both_arms() -> None:
    arm = {
        "nq": {0: {"a": 1.0, "b": 0.0}, 1: {"a": 1.0, "b": 1.0}, 2: {"a": 1.0, "b": 1.0}},
        "tq": {0: {"c": 1.0, "d": 1.0, "e": 0.0, "f": 0.0}, 1: {"c": 0.0, "d": 0.0, "e": 0.0, "f": 0.0}},
    }
    base = {name: {s: dict.fromkeys(qs, 0.0) for s, qs in by_seed.items()} for name, by_seed in arm.items()}
    c = compare_average("inspo", arm, "static", base)  # seed 2 has nq only: left out
    assert c.per_seed == {0: pytest.approx((0.5 + 0.5) / 2), 1: pytest.approx((1.0 + 0.0) / 2)}
    assert (c.mean, c.seeds, c.questions, c.benchmark_questions) == (0.5, 2, 6, {"nq": 2, "tq": 4})
    assert c.method == AVERAGE_T
    on_one_seed = compare_average("inspo", arm, "static", {b: {0: base[b][0]} for b in base})
    assert (on_one_seed.seeds, on_one_seed.method) == (1, QUESTIONS_T)


@pytest.mark.parametrize(
    ("arm", "base", "message"),
    [
        ({"nq": {0: {"a": 1.0, "b": 0.0}}}, {"tq": {0: {"a": 0.0, "b": 0.0}}}, "same benchmarks"),
        ({"nq": {0: {"a": 1.0, "b": 0.0}}, "tq": {1: {"a": 1.0, "b": 0.0}}}, None, "no seed that has every"),
        ({"nq": {0: {"a": 2.0, "b": 0.0}}}, None, "'inspo on nq', seed 0, question 'a': score 2.0"),
    ],
)
def test_compare_average_says_what_is_wrong(arm: dict, base: dict | None, message: str) -> None:
    zeros = {b: {s: dict.fromkeys(qs, 0.0) for s, qs in by_seed.items()} for b, by_seed in arm.items()}
    with pytest.raises(ValueError, match=message):
        compare_average("inspo", arm, "static", base if base is not None else zeros)


# ---------------------------------------------------------------------------------------------------------------------
# Pairing, summaries and verdicts


def test_it_pairs_on_the_seeds_and_question_ids_both_arms_have() -> None:
    arm = {0: {"a": 1.0, "b": 1.0, "x": 1.0}, 1: {"a": 0.0, "b": 1.0}, 7: {"a": 1.0, "b": 1.0}}
    base = {0: {"a": 0.0, "b": 1.0}, 1: {"a": 0.0, "b": 0.0, "y": 1.0}, 9: {"a": 0.0, "b": 0.0}}
    c = compare("inspo", arm, "static", base)
    assert (c.seeds, c.questions) == (2, 2)
    assert c.per_seed == {0: 0.5, 1: 0.5}
    assert c.mean == 0.5


def test_arm_summary_is_the_mean_over_seeds_of_each_seeds_mean() -> None:
    s = arm_summary("static", {3: {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0}, 5: {"a": 1.0, "b": 1.0, "c": 0.5}})
    assert s.per_seed == {3: 0.25, 5: pytest.approx(2.5 / 3)}
    assert s.mean == pytest.approx((0.25 + 2.5 / 3) / 2)
    assert (s.arm, s.seeds, s.questions) == ("static", 2, 3)


@pytest.mark.parametrize(
    ("low", "high", "outcome"),
    [
        (-0.051, 0.030, "no detectable difference"),
        (0.004, 0.050, "inspo better than static"),
        (-0.070, -0.002, "inspo worse than static"),
    ],
)
def test_the_verdict_says_which_arm_is_better_only_when_the_interval_excludes_zero(
    low: float, high: float, outcome: str
) -> None:
    c = Comparison("inspo", "static", (low + high) / 2, low, high, 0.95, 3, 195, {}, SEEDS_T)
    assert c.verdict().endswith(f"over 3 seeds × 195 questions: {outcome}")
    assert c.excludes_zero() == (outcome != "no detectable difference")


def test_a_verdict_on_a_benchmark_or_the_average_names_it_and_each_benchmarks_questions() -> None:
    one = Comparison("inspo", "static", 0.02, 0.01, 0.03, 0.95, 3, 125, {}, SEEDS_T, scope="nq")
    assert one.verdict().startswith("inspo − static on nq: +2.0 EM points [+1.0, +3.0] over 3 seeds × 125 questions")
    average = Comparison(
        "inspo", "static", 0.0, -0.01, 0.01, 0.95, 3, 625, {}, AVERAGE_T, scope="Avg. of 2 benchmarks",
        benchmark_questions={"nq": 125, "hotpotqa": 500},
    )  # fmt: skip
    assert average.verdict() == (
        "inspo − static on Avg. of 2 benchmarks: +0.0 EM points [−1.0, +1.0] over 3 seeds × (125 + 500) questions: "
        "no detectable difference"
    )


def test_the_verdict_signs_numbers_with_the_minus_sign_and_one_decimal() -> None:
    c = Comparison("inspo", "static", -0.01, -0.051, 0.03, 0.95, 3, 195, {}, SEEDS_T)
    assert c.verdict() == (
        "inspo − static: −1.0 EM points [−5.1, +3.0] over 3 seeds × 195 questions: no detectable difference"
    )
    tiny = Comparison("a", "b", -0.0001, -0.02, 0.02, 0.95, 2, 10, {}, SEEDS_T)
    assert tiny.verdict("F1 points").startswith("a − b: +0.0 F1 points [−2.0, +2.0]")
    assert "-" not in tiny.verdict()


def test_a_one_seed_verdict_says_its_interval_counts_no_seed_variance() -> None:
    c = Comparison("inspo", "static", 0.05, 0.01, 0.09, 0.95, 1, 195, {0: 0.05}, QUESTIONS_T)
    assert "over 1 seed × 195 questions (one seed: the interval counts question sampling only" in c.verdict()
    assert c.verdict().endswith(": inspo better than static")


@pytest.mark.parametrize(
    ("arm", "base", "message"),
    [
        ({}, {0: {"a": 1.0}}, "no scores"),
        ({0: {"a": 1.0, "b": 0.0}}, {1: {"a": 1.0, "b": 0.0}}, "share no seed"),
        ({0: {"a": 1.0, "b": 0.0}}, {0: {"c": 1.0, "d": 0.0}}, "share 0 question"),
        ({0: {"a": 1.0, "b": 0.0}}, {0: {"a": 1.0, "c": 0.0}}, "share 1 question"),
        ({0: {"a": 1.5, "b": 0.0}}, {0: {"a": 1.0, "b": 0.0}}, "'a': score 1.5 is not in"),
        ({0: {"a": math.nan, "b": 0.0}}, {0: {"a": 1.0, "b": 0.0}}, "score nan is not in"),
        ({0: {"a": "1", "b": 0.0}}, {0: {"a": 1.0, "b": 0.0}}, "score '1' is not in"),
        ({"0": {"a": 1.0, "b": 0.0}}, {0: {"a": 1.0, "b": 0.0}}, "seed '0' is not an integer"),
        ({0: {"a": True, "b": 0.0}}, {0: {"a": 1.0, "b": 0.0}}, "score True is not in"),
    ],
)
def test_bad_input_is_a_value_error_that_says_what_is_wrong(arm: object, base: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        compare("inspo", arm, "static", base)  # type: ignore[arg-type]


def test_arm_summary_refuses_an_arm_without_scores_or_with_an_empty_seed() -> None:
    with pytest.raises(ValueError, match="no scores"):
        arm_summary("static", {})
    with pytest.raises(ValueError, match=r"seeds \[2\] have no scores"):
        arm_summary("static", {1: {"a": 1.0}, 2: {}})


# ---------------------------------------------------------------------------------------------------------------------
# Seeds needed


def comparison_with(per_seed_sd: float, seeds: int = 3, question_part: float = 0.0) -> Comparison:
    return Comparison("a", "b", 0.0, -0.1, 0.1, 0.95, seeds, 200, {}, SEEDS_T, per_seed_sd**2 / seeds, question_part)


def test_seeds_needed_shrinks_as_the_difference_to_detect_grows() -> None:
    counts = [seeds_needed(comparison_with(0.05), d) for d in (0.01, 0.02, 0.04, 0.08)]
    assert all(isinstance(n, int) for n in counts)
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert seeds_needed(comparison_with(0.05), -0.02) == counts[1]


def test_seeds_needed_is_none_with_one_seed_or_when_shared_questions_alone_hide_the_difference() -> None:
    assert seeds_needed(comparison_with(0.05, seeds=1), 0.02) is None
    assert seeds_needed(comparison_with(0.05, question_part=0.01**2), 0.02) is None  # (1.96 + 0.84)·0.01 > 0.02
    with pytest.raises(ValueError, match="non-zero"):
        seeds_needed(comparison_with(0.05), 0.0)


def test_seeds_needed_is_none_when_every_paired_difference_was_the_same() -> None:
    same = {s: {"a": 1.0, "b": 0.0, "c": 0.0} for s in range(3)}
    identical = compare("inspo", same, "static", same)
    assert (identical.low, identical.high) == (0.0, 0.0)
    assert seeds_needed(identical, 0.05) is None  # no variance observed: nothing to extrapolate, not "2 seeds"


def test_a_verdict_without_variance_says_the_interval_cannot_be_estimated_and_why_no_seed_count_is_given() -> None:
    same = {s: {"a": 1.0, "b": 0.0, "c": 0.0} for s in range(2)}
    identical = compare("inspo", same, "static", same)
    assert identical.without_variance()
    assert identical.verdict() == (
        "inspo − static: +0.0 EM points [+0.0, +0.0] over 2 seeds × 3 questions (both arms scored every question "
        "alike in every seed, so the interval cannot be estimated): no detectable difference"
    )
    assert no_seeds_needed_reason(identical, 0.05) == (
        "every paired difference was the same, so there is no variance to extrapolate from"
    )
    better = compare(
        "inspo", {s: {"a": 1.0, "b": 1.0} for s in range(2)}, "static", {s: {"a": 0.0, "b": 0.0} for s in range(2)}
    )
    assert "(every question's score differed by the same amount in every seed, so the interval cannot be" in (
        better.verdict()
    )
    varied = comparison_with(0.05)
    assert not varied.without_variance() and "cannot be estimated" not in varied.verdict()
    assert no_seeds_needed_reason(varied, 0.05) is None
    assert no_seeds_needed_reason(comparison_with(0.05, seeds=1), 0.02) == (
        "one seed shows no seed-to-seed variance to extrapolate from"
    )
    hidden = no_seeds_needed_reason(comparison_with(0.05, question_part=0.01**2), 0.02)
    assert hidden == "the questions alone hide such a difference: more questions are needed, not more seeds"


def test_the_seeds_needed_give_about_the_power_asked_for_in_simulation() -> None:
    per_seed_sd, difference = 0.03, 0.02
    n = seeds_needed(comparison_with(per_seed_sd), difference)
    assert n is not None
    rng = np.random.default_rng(3)
    d = difference + rng.normal(0.0, per_seed_sd, (2000, n, 1)) + np.zeros((1, 1, 2))
    iv = seed_question_interval(d)
    power = float(np.mean(iv.low > 0.0))
    assert 0.75 <= power <= 0.9, (n, power)


# ---------------------------------------------------------------------------------------------------------------------
# Coverage simulation


def test_the_simulated_true_difference_is_the_mean_difference_of_many_draws() -> None:
    model = SimulatedExperiments(seed_sd=LARGE_SEED_SD)
    draws = model.draw(np.random.default_rng(4), 2000, 5)
    standard_error = draws.mean(axis=(1, 2)).std() / math.sqrt(draws.shape[0])
    assert abs(draws.mean() - model.true_difference()) < 4 * standard_error


@pytest.mark.parametrize("seeds", [3, 10])
@pytest.mark.parametrize("seed_sd", [SMALL_SEED_SD, LARGE_SEED_SD])
def test_the_95_percent_interval_covers_the_true_difference_93_to_97_percent_of_the_time(
    seeds: int, seed_sd: float
) -> None:
    model = SimulatedExperiments(seed_sd=seed_sd)
    d = model.draw(np.random.default_rng(seeds * 1000 + int(seed_sd * 100)), SIMULATIONS, seeds)
    iv = seed_question_interval(d)
    truth = model.true_difference()
    coverage = float(np.mean((iv.low <= truth) & (truth <= iv.high)))
    assert 0.93 <= coverage <= 0.97, coverage


BENCHMARKS = ((125, -2.0, 0.1), (500, -1.0, 0.3), (250, -0.5, -0.1))
"""Benchmarks of unequal sizes (questions, difficulty mean, the arm's effect), as bench/coverage.py draws them:
true differences about +1.8, +5.2 and −1.5 EM points, so weighting by questions would move the mean."""


def several(count: int, seed_sd: float, correlation: float) -> SimulatedBenchmarks:
    """The first `count` of BENCHMARKS, seed effects correlated across them by `correlation`."""
    specs = BENCHMARKS[:count]
    return SimulatedBenchmarks(
        tuple(SimulatedExperiments(seed_sd=seed_sd, questions=q, difficulty_mean=m, effect=e) for q, m, e in specs),
        seed_correlation=correlation,
    )


def test_simulated_benchmarks_draw_each_benchmarks_questions_and_average_their_true_differences() -> None:
    model = several(2, LARGE_SEED_SD, 1.0)
    draws = model.draw(np.random.default_rng(6), 2000, 3)
    assert [d.shape for d in draws] == [(2000, 3, 125), (2000, 3, 500)]
    truths = [b.true_difference() for b in model.benchmarks]
    assert model.true_difference() == pytest.approx(sum(truths) / 2)
    for d, truth in zip(draws, truths, strict=True):
        assert abs(d.mean() - truth) < 4 * d.mean(axis=(1, 2)).std() / math.sqrt(2000)
    seed_means = [d.mean(axis=2) for d in draws]  # correlation 1: one seed effect shared by both benchmarks
    assert np.corrcoef(seed_means[0].ravel(), seed_means[1].ravel())[0, 1] > 0.5


@pytest.mark.parametrize(
    ("count", "seeds", "seed_sd", "correlation"),
    [
        (2, 3, SMALL_SEED_SD, 1.0),
        (2, 3, LARGE_SEED_SD, 1.0),
        (2, 10, SMALL_SEED_SD, 0.5),
        (2, 10, LARGE_SEED_SD, 1.0),
        (3, 3, LARGE_SEED_SD, 0.5),
        (3, 5, 0.2, 0.0),
    ],
)
@pytest.mark.slow
def test_the_averages_95_percent_interval_covers_the_unweighted_mean_of_the_true_differences(
    count: int, seeds: int, seed_sd: float, correlation: float
) -> None:
    model = several(count, seed_sd, correlation)
    draws = model.draw(np.random.default_rng([count, seeds, int(100 * seed_sd), int(10 * correlation)]), 1000, seeds)
    iv = benchmark_average_interval(draws)
    truth = model.true_difference()
    coverage = float(np.mean((iv.low <= truth) & (truth <= iv.high)))
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.slow
def test_pooling_every_benchmarks_questions_as_one_misses_the_average_when_the_questions_dominate() -> None:
    model = several(2, SMALL_SEED_SD, 1.0)
    draws = model.draw(np.random.default_rng(11), 1000, 10)
    pooled = seed_question_interval(np.concatenate(draws, axis=-1))  # the 500-question benchmark weighs 4/5
    truth = model.true_difference()
    assert float(np.mean((pooled.low <= truth) & (truth <= pooled.high))) < 0.85


@pytest.mark.parametrize("seeds", [3, 10])
@pytest.mark.slow
def test_the_pooled_one_level_bootstrap_under_covers_when_seed_variance_is_large(seeds: int) -> None:
    rng = np.random.default_rng(seeds)
    coverage = {}
    for seed_sd in (SMALL_SEED_SD, LARGE_SEED_SD):
        model = SimulatedExperiments(seed_sd=seed_sd)
        low, high = pooled_bootstrap_intervals(model.draw(rng, SIMULATIONS, seeds), rng, resamples=1000)
        truth = model.true_difference()
        coverage[seed_sd] = float(np.mean((low <= truth) & (truth <= high)))
    assert coverage[LARGE_SEED_SD] < 0.85, coverage
    assert coverage[LARGE_SEED_SD] < coverage[SMALL_SEED_SD] - 0.08, coverage


def test_the_vectorised_pooled_bootstrap_is_paired_bootstrap_over_pooled_answers() -> None:
    rng = np.random.default_rng(5)
    d = SimulatedExperiments(seed_sd=LARGE_SEED_SD, questions=100).draw(rng, 1, 3)
    low, high = pooled_bootstrap_intervals(d, rng, resamples=4000)
    pooled = d.reshape(-1)
    reference = paired_bootstrap(list(np.maximum(pooled, 0.0)), list(np.maximum(-pooled, 0.0)), resamples=4000)
    assert reference.mean == pytest.approx(float(pooled.mean()))
    assert (float(low[0]), float(high[0])) == (
        pytest.approx(reference.low, abs=0.01),
        pytest.approx(reference.high, abs=0.01),
    )


# -- the population's rewards (#45 item 2) -------------------------------------------------------------------------


def test_the_recent_reward_interval_covers_the_true_mean_about_95_percent_of_the_time():
    import random

    from inspo_engine.stats import mean_of_means_interval

    rng, hits, trials = random.Random(0), 0, 2000
    for _ in range(trials):
        # Five steps of 1–3 questions each, every group mean a draw around 0.3 with sd 0.19.
        groups = [[rng.gauss(0.3, 0.19) for _ in range(rng.randint(1, 3))] for _ in range(5)]
        interval = mean_of_means_interval(groups)
        hits += interval.low <= 0.3 <= interval.high
    assert 0.93 <= hits / trials <= 0.97


def test_the_questions_to_resolve_a_difference_give_the_promised_power_and_separate_the_intervals():
    import random

    from inspo_engine.stats import mean_of_means_interval, samples_to_resolve

    n = samples_to_resolve(0.1, 0.19)
    assert n == 95
    rng, separated, trials = random.Random(1), 0, 1000
    for _ in range(trials):
        best = mean_of_means_interval([[rng.gauss(0.4, 0.19)] for _ in range(n)])
        other = mean_of_means_interval([[rng.gauss(0.3, 0.19)] for _ in range(n)])
        separated += not best.overlaps(other)
    # The intervals stop overlapping in about 80 % of the draws (t's wider critical value costs a little).
    assert 0.72 <= separated / trials <= 0.86
