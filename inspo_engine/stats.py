"""Statistics for comparing arms of an experiment on the same questions over several training seeds: per-arm means,
paired differences with intervals that count seed and question variance, verdicts in words, seed counts, and the
simulation that checks the intervals' coverage; no models, no I/O."""

from __future__ import annotations

import math
import numbers
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Scores = Mapping[int, Mapping[str, float]]
"""seed → question id → score (EM 0/1 or F1 in [0, 1])."""

FloatArray = npt.NDArray[np.float64]

SEEDS_T = "t over per-seed differences + shared-question variance"
QUESTIONS_T = "t over questions (one seed: no seed variance)"
AVERAGE_T = "t over per-seed differences of the benchmark average + each benchmark's shared-question variance × (1/B)²"
MINUS = "\N{MINUS SIGN}"
ZERO_WIDTH = 1e-12
"""An interval no wider than this (rounding aside, none at all) has no variance behind it."""


# ---------------------------------------------------------------------------------------------------------------------
# One-level paired bootstrap (questions only)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of (a − b) over paired items with a bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, level: float = 0.95, seed: int = 0
) -> PairedDifference:
    """Percentile bootstrap of mean(a − b), resampling the paired items (questions) with replacement.

    It treats every pair as independent, so answers pooled over several training seeds leave the seed-to-seed variance
    out; compare arms over seeds with `compare`.

    >>> diff = paired_bootstrap([1.0] * 30 + [0.0] * 70, [0.0] * 100)
    >>> round(diff.mean, 2), diff.excludes_zero()
    (0.3, True)
    >>> paired_bootstrap([1.0, 0.0], [0.0, 1.0]).excludes_zero()
    False
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty score lists (got {len(a)} and {len(b)})")
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(statistics.fmean(rng.choices(deltas, k=n)) for _ in range(resamples))
    tail = (1.0 - level) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int((1.0 - tail) * (resamples - 1))]
    return PairedDifference(mean=statistics.fmean(deltas), low=low, high=high, n=n)


# ---------------------------------------------------------------------------------------------------------------------
# Quantiles


def normal_quantile(p: float) -> float:
    """The standard normal's p-quantile.

    >>> round(normal_quantile(0.975), 4)
    1.96
    """
    return statistics.NormalDist().inv_cdf(p)


def _t_central(theta: float, df: int) -> float:
    """P(|T| ≤ √df·tan θ) for Student's t with integer df, by its finite series (Abramowitz & Stegun 26.7.3–4)."""
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2.0 * theta / math.pi
    term, total = math.cos(theta), math.cos(theta)
    for k in range(3, df, 2):
        term *= c2 * (k - 1) / k
        total += term
    return 2.0 / math.pi * (theta + math.sin(theta) * total)


def t_quantile(p: float, df: int) -> float:
    """Student's t p-quantile with integer df ≥ 1 (exact series up to 2000 df, Cornish–Fisher beyond).

    >>> round(t_quantile(0.975, 1), 4), round(t_quantile(0.975, 2), 4), round(t_quantile(0.975, 10), 4)
    (12.7062, 4.3027, 2.2281)
    """
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"need 0 < p < 1 and df ≥ 1 (got p={p}, df={df})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df > 2000:
        z = normal_quantile(p)
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    target, low, high = 2.0 * p - 1.0, 0.0, math.pi / 2
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_central(mid, df) < target else (low, mid)
    return math.sqrt(df) * math.tan((low + high) / 2)


# ---------------------------------------------------------------------------------------------------------------------
# One mean with its interval: an evaluation's score, an instruction's recent reward


@dataclass(frozen=True)
class MeanInterval:
    """A mean with its interval (None where fewer than two values, or none, leave nothing to estimate it from) and
    the count of values behind it."""

    mean: float | None
    low: float | None
    high: float | None
    n: int

    def overlaps(self, other: MeanInterval) -> bool:
        """Whether the two intervals share a value; True where either has none (nothing tells them apart).

        >>> MeanInterval(0.5, 0.4, 0.6, 9).overlaps(MeanInterval(0.3, 0.1, 0.45, 9))
        True
        >>> MeanInterval(0.5, 0.4, 0.6, 9).overlaps(MeanInterval(0.2, 0.1, 0.3, 9))
        False
        """
        if None in (self.low, self.high, other.low, other.high):
            return True
        return not (self.high < other.low or other.high < self.low)  # type: ignore[operator]


def mean_of_means_interval(groups: Sequence[Sequence[float]], *, level: float = 0.95) -> MeanInterval:
    """The mean of the groups' means (each group: one step's values) with a t interval, as an instruction's weight
    averages its per-step mean rewards.

    Every value is taken as a draw of one distribution whose variance σ² is estimated from all n values around their
    overall mean (so a policy that drifts between steps widens it); the mean of k group means, group s holding n_s
    values, then has variance σ²·Σ(1/n_s)/k², and the interval is mean ± t(n−1)·σ·√(Σ 1/n_s)/k. With one value per
    group it is the usual t interval of k values. Empty groups are skipped; fewer than two values give no interval.

    Four steps of one value each, 1, 0, 1, 0 (sd √⅓): half-width t(3)·√⅓·√4/4.

    >>> iv = mean_of_means_interval([[1.0], [0.0], [1.0], [0.0]])
    >>> iv.mean, round(iv.high - iv.mean, 4), round(t_quantile(0.975, 3) * (1 / 3) ** 0.5 / 2, 4)
    (0.5, 0.9187, 0.9187)
    >>> mean_of_means_interval([[0.2, 0.4], [0.3]]).n, mean_of_means_interval([[0.2]]).low is None
    (3, True)
    """
    kept = [list(group) for group in groups if len(group)]
    values = [v for group in kept for v in group]
    n = len(values)
    if not kept:
        return MeanInterval(None, None, None, 0)
    k = len(kept)
    mean = statistics.fmean(statistics.fmean(group) for group in kept)
    if n < 2:
        return MeanInterval(mean, None, None, n)
    sd = statistics.stdev(values)
    half = t_quantile(0.5 + level / 2, n - 1) * sd * math.sqrt(sum(1 / len(group) for group in kept)) / k
    return MeanInterval(mean, mean - half, mean + half, n)


def samples_to_resolve(difference: float, sd: float, *, level: float = 0.95, power: float = 0.8) -> int:
    """Samples per instruction (questions, each scored by its group's mean reward) for two instructions whose mean
    rewards differ by `difference` to be told apart the way the run page tells them apart: their `level` intervals
    (half-width z·sd/√n each) no longer overlap, with probability `power`, when the reward's standard deviation per
    sample is `sd`. The observed difference has sd·√(2/n), so n = (2·z_(1−α/2) + √2·z_power)²·sd²/difference²,
    about 26.1·sd²/difference² at 95 % and 80 %. (A two-sided test of the difference would need less,
    2·(z_(1−α/2) + z_power)²·sd²/difference² ≈ 15.7·sd²/difference²: non-overlap of two intervals is the stricter
    rule.)

    >>> samples_to_resolve(0.05, 0.19), samples_to_resolve(0.1, 0.19), samples_to_resolve(0.2, 0.19)
    (378, 95, 24)
    """
    if difference == 0.0 or not math.isfinite(difference) or sd < 0.0:
        raise ValueError(f"need a non-zero difference and sd ≥ 0 (got {difference}, {sd})")
    z = 2 * normal_quantile(0.5 + level / 2) + math.sqrt(2) * normal_quantile(power)
    return max(2, math.ceil(z**2 * sd**2 / difference**2))


# ---------------------------------------------------------------------------------------------------------------------
# The interval of a seeds × questions matrix of paired differences


@dataclass(frozen=True)
class Interval:
    """Mean of a seeds × questions difference matrix (per leading index) with its interval and variance parts."""

    mean: FloatArray
    low: FloatArray
    high: FloatArray
    seed_part: FloatArray
    """Variance of the mean from the per-seed differences (seed-to-seed and each seed's own question noise)."""
    question_part: FloatArray
    """Variance of the mean from the questions every seed shares (with one seed: all the question variance)."""


def seed_question_interval(differences: npt.ArrayLike, *, level: float = 0.95) -> Interval:
    """Interval of the mean of `differences` (..., seeds, questions), vectorised over the leading axes.

    With S ≥ 2 seeds and Q questions, d̄_s is seed s's mean difference and m_q question q's mean over seeds:
    half-width² = t²(S−1)·var(d̄_s)/S + z²·max(0, MS_q − MS_e)/(S·Q), where MS_q = S·var(m_q) and MS_e is the
    residual mean square of the two-way layout. The first term is the t-interval over per-seed differences (their
    variance holds the seed-to-seed variance and each seed's question noise); the second adds what the questions
    shared by every seed contribute, which per-seed differences cannot show. With one seed: t(Q−1) over questions.

    Three seeds, two questions; the per-seed differences are ½, 0 and 1 and the questions share nothing
    (MS_q = MS_e = ⅙), so the half-width is t(2)·√(¼ / 3):

    >>> iv = seed_question_interval([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    >>> float(iv.mean), round(float(iv.high - iv.mean), 4), round(0.5 * 4.302653 / 3**0.5, 4)
    (0.5, 1.2421, 1.2421)
    """
    return benchmark_average_interval([differences], level=level)


def benchmark_average_interval(differences: Sequence[npt.ArrayLike], *, level: float = 0.95) -> Interval:
    """Interval of the unweighted mean over B benchmarks of each one's mean difference, vectorised over the leading
    axes. Each item is one benchmark's (..., seeds, questions) matrix: the same seeds in the same order, questions of
    its own (any number ≥ 2).

    Every benchmark weighs 1/B, whatever its number of questions (the paper's Table 1 average). The t part is over the
    per-seed differences of that average, D_s = (1/B)·Σ_b d̄_bs, so a seed that is better on every benchmark counts
    once, with all its correlation: t²(S−1)·var(D_s)/S. Each benchmark has its own questions, so their shared-question
    parts add, each weighted (1/B)²: z²·Σ_b (1/B)²·max(0, MS_q,b − MS_e,b)/(S·Q_b) (see `seed_question_interval`,
    which is this with B = 1). With one seed: t(min_b Q_b − 1)·√(Σ_b (1/B)²·var_b(d_q)/Q_b), questions only.

    Two benchmarks over three seeds: the first with per-seed differences ½, 0, 1 (questions sharing nothing), the
    second of four questions all tied. The average's per-seed differences are ¼, 0, ½, so the half-width is
    t(2)·√(var(¼, 0, ½) / 3) = t(2)·√(1/48):

    >>> iv = benchmark_average_interval([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], np.zeros((3, 4))])
    >>> float(iv.mean), round(float(iv.high - iv.mean), 4), round(4.302653 * (1 / 48) ** 0.5, 4)
    (0.25, 0.621, 0.621)
    """
    matrices = [np.asarray(d, dtype=np.float64) for d in differences]
    if not matrices:
        raise ValueError("need at least one benchmark's (…, seeds, questions) matrix")
    for d in matrices:
        if d.ndim < 2 or d.shape[-1] < 2 or d.shape[-2] < 1 or d.shape[:-1] != matrices[0].shape[:-1]:
            shapes = [m.shape for m in matrices]
            raise ValueError(f"need (…, seeds, questions) matrices with the same seeds, ≥ 2 questions (got {shapes})")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1 (got {level})")
    weight, seeds, p = 1.0 / len(matrices), matrices[0].shape[-2], 0.5 + level / 2
    seed_means = weight * np.stack([d.mean(axis=-1) for d in matrices]).sum(axis=0)
    mean = seed_means.mean(axis=-1)
    if seeds == 1:
        variance = weight**2 * np.stack([d[..., 0, :].var(axis=-1, ddof=1) / d.shape[-1] for d in matrices]).sum(axis=0)
        half = t_quantile(p, min(d.shape[-1] for d in matrices) - 1) * np.sqrt(variance)
        return Interval(mean, mean - half, mean + half, np.zeros_like(mean), variance)
    seed_part = seed_means.var(axis=-1, ddof=1) / seeds
    question_part = weight**2 * np.stack([_shared_question_part(d) for d in matrices]).sum(axis=0)
    half = np.sqrt(t_quantile(p, seeds - 1) ** 2 * seed_part + normal_quantile(p) ** 2 * question_part)
    return Interval(mean, mean - half, mean + half, seed_part, question_part)


def _shared_question_part(d: FloatArray) -> FloatArray:
    """max(0, MS_q − MS_e)/(S·Q): the variance of the mean from the questions that all S ≥ 2 seeds of `d`
    (..., seeds, questions) share, from the two-way layout's question and residual mean squares."""
    seeds, questions = d.shape[-2], d.shape[-1]
    mean = d.mean(axis=(-2, -1))
    question_means = d.mean(axis=-2)
    residual = d - d.mean(axis=-1)[..., :, None] - question_means[..., None, :] + mean[..., None, None]
    ms_question = seeds * question_means.var(axis=-1, ddof=1)
    ms_residual = (residual**2).sum(axis=(-2, -1)) / ((seeds - 1) * (questions - 1))
    result: FloatArray = np.maximum(ms_question - ms_residual, 0.0) / (seeds * questions)
    return result


# ---------------------------------------------------------------------------------------------------------------------
# Arms and comparisons


@dataclass(frozen=True)
class ArmSummary:
    """One arm over its seeds: the mean over seeds of each seed's mean score."""

    arm: str
    mean: float
    per_seed: dict[int, float]
    seeds: int
    questions: int
    """Questions per seed (the fewest any seed scored, should they differ)."""


@dataclass(frozen=True)
class Comparison:
    """arm − baseline, paired on (seed, question) over the seeds and question ids both arms have."""

    arm: str
    baseline: str
    mean: float
    low: float
    high: float
    level: float
    seeds: int
    questions: int
    per_seed: dict[int, float]
    method: str
    seed_part: float = 0.0
    """Variance of the mean from the per-seed differences (0 with one seed)."""
    question_part: float = 0.0
    """Variance of the mean from the questions all seeds share (with one seed, all question variance)."""
    scope: str = ""
    """What was compared, when not the one benchmark of the scores: a benchmark's name, or the average's."""
    benchmark_questions: dict[str, int] = field(default_factory=dict)
    """For an average over benchmarks: each benchmark's questions (`questions` is their sum)."""

    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def without_variance(self) -> bool:
        """Every paired difference was the same, on every question of every seed (both arms scored every question
        alike, say): nothing varied, so the interval has no width and says nothing.

        >>> Comparison("inspo", "static", 0.0, 0.0, 0.0, 0.95, 2, 8, {}, SEEDS_T).without_variance()
        True
        """
        return self.high - self.low <= ZERO_WIDTH

    def verdict(self, unit: str = "EM points") -> str:
        """The comparison in words; a unit ending in "points" shows values ×100 with one decimal. An interval
        without variance is said to be one.

        >>> Comparison("inspo", "static", -0.01, -0.051, 0.03, 0.95, 3, 195, {}, SEEDS_T).verdict()
        'inspo − static: −1.0 EM points [−5.1, +3.0] over 3 seeds × 195 questions: no detectable difference'
        >>> Comparison("inspo", "static", 0.02, 0.01, 0.03, 0.95, 3, 625, {}, AVERAGE_T, scope="Avg. of 2 benchmarks",
        ...            benchmark_questions={"nq": 125, "hotpotqa": 500}).verdict()
        'inspo − static on Avg. of 2 benchmarks: +2.0 EM points [+1.0, +3.0] over 3 seeds × (125 + 500) questions: \
inspo better than static'
        >>> Comparison("inspo", "static", 0.0, 0.0, 0.0, 0.95, 2, 8, {}, SEEDS_T).verdict()
        'inspo − static: +0.0 EM points [+0.0, +0.0] over 2 seeds × 8 questions (both arms scored every question \
alike in every seed, so the interval cannot be estimated): no detectable difference'
        """
        scale, digits = (100.0, 1) if unit.endswith("points") else (1.0, 3)

        def signed(x: float) -> str:
            text = f"{round(scale * x, digits) + 0.0:+.{digits}f}"
            return text.replace("-", MINUS)

        seeds = f"{self.seeds} seed" + ("s" if self.seeds != 1 else "")
        caveat = ""
        if self.seeds == 1:
            caveat = " (one seed: the interval counts question sampling only, no seed-to-seed variance)"
        if self.without_variance():
            alike = "both arms scored every question alike"
            if self.mean != 0.0:
                alike = "every question's score differed by the same amount"
            caveat = f" ({alike} in every seed, so the interval cannot be estimated)"
        if self.high < 0.0:
            outcome = f"{self.arm} worse than {self.baseline}"
        elif self.low > 0.0:
            outcome = f"{self.arm} better than {self.baseline}"
        else:
            outcome = "no detectable difference"
        scope = f" on {self.scope}" if self.scope else ""
        counts = self.benchmark_questions.values()
        questions = f"({' + '.join(map(str, counts))})" if len(counts) > 1 else str(self.questions)
        return (
            f"{self.arm} {MINUS} {self.baseline}{scope}: {signed(self.mean)} {unit} "
            f"[{signed(self.low)}, {signed(self.high)}] over {seeds} × {questions} questions"
            f"{caveat}: {outcome}"
        )


def _checked(arm: str, scores: Scores) -> Scores:
    """`scores` when every score is a finite number in [0, 1]; otherwise a ValueError that names the bad one."""
    if not scores:
        raise ValueError(f"arm {arm!r} has no scores")
    for seed, by_question in scores.items():
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise ValueError(f"arm {arm!r}: seed {seed!r} is not an integer")
        for question, score in by_question.items():
            ok = isinstance(score, numbers.Real) and not isinstance(score, bool) and 0.0 <= score <= 1.0
            if not ok:
                raise ValueError(f"arm {arm!r}, seed {seed}, question {question!r}: score {score!r} is not in [0, 1]")
    return scores


def arm_summary(arm: str, scores: Scores) -> ArmSummary:
    """The mean over seeds of each seed's mean score.

    >>> arm_summary("static", {0: {"q1": 1.0, "q2": 0.0}, 1: {"q1": 1.0, "q2": 1.0}}).mean
    0.75
    """
    _checked(arm, scores)
    empty = sorted(seed for seed, by_question in scores.items() if not by_question)
    if empty:
        raise ValueError(f"arm {arm!r}: seeds {empty} have no scores")
    per_seed = {seed: statistics.fmean(scores[seed].values()) for seed in sorted(scores)}
    return ArmSummary(
        arm=arm,
        mean=statistics.fmean(per_seed.values()),
        per_seed=per_seed,
        seeds=len(per_seed),
        questions=min(len(by_question) for by_question in scores.values()),
    )


def _paired_matrix(
    arm: str, scores: Scores, baseline: str, baseline_scores: Scores
) -> tuple[list[int], list[str], FloatArray]:
    """The common seeds, the question ids every common seed of both arms has, and arm − baseline on them."""
    seeds = sorted(set(scores) & set(baseline_scores))
    if not seeds:
        raise ValueError(
            f"{arm!r} and {baseline!r} share no seed (seeds {sorted(scores)} and {sorted(baseline_scores)})"
        )
    common = set(scores[seeds[0]])
    for seed in seeds:
        common &= set(scores[seed]) & set(baseline_scores[seed])
    if len(common) < 2:
        raise ValueError(
            f"{arm!r} and {baseline!r} share {len(common)} question id(s) over seeds {seeds}; need at least 2"
        )
    questions = sorted(common, key=str)
    d = np.array(
        [[float(scores[s][q]) - float(baseline_scores[s][q]) for q in questions] for s in seeds], dtype=np.float64
    )
    return seeds, questions, d


def compare(
    arm: str, scores: Scores, baseline: str, baseline_scores: Scores, *, level: float = 0.95, seed: int = 0
) -> Comparison:
    """arm − baseline on the common (seed, question) pairs, with `seed_question_interval`'s interval clipped to the
    differences scores in [0, 1] can have, [−1, 1].

    `seed` is accepted for callers written against a bootstrap; the interval is analytic and draws nothing.

    >>> arm = {0: {"a": 1.0, "b": 0.0}, 1: {"a": 0.0, "b": 0.0}, 2: {"a": 1.0, "b": 1.0}}
    >>> base = {s: {"a": 0.0, "b": 0.0} for s in range(3)}
    >>> c = compare("inspo", arm, "static", base)
    >>> c.verdict()
    'inspo − static: +50.0 EM points [−74.2, +100.0] over 3 seeds × 2 questions: no detectable difference'
    """
    _checked(arm, scores)
    _checked(baseline, baseline_scores)
    seeds, questions, d = _paired_matrix(arm, scores, baseline, baseline_scores)
    interval = seed_question_interval(d, level=level)
    return Comparison(
        arm=arm,
        baseline=baseline,
        mean=float(interval.mean),
        low=max(float(interval.low), -1.0),
        high=min(float(interval.high), 1.0),
        level=level,
        seeds=len(seeds),
        questions=len(questions),
        per_seed={s: float(row.mean()) for s, row in zip(seeds, d, strict=True)},
        method=SEEDS_T if len(seeds) > 1 else QUESTIONS_T,
        seed_part=float(interval.seed_part),
        question_part=float(interval.question_part),
    )


def compare_average(
    arm: str,
    scores: Mapping[str, Scores],
    baseline: str,
    baseline_scores: Mapping[str, Scores],
    *,
    level: float = 0.95,
) -> Comparison:
    """arm − baseline on the unweighted mean over benchmarks (benchmark → seed → question id → score), each benchmark
    weighted 1/B: paired on the seeds that both arms have on every benchmark and, per benchmark, on the question ids
    all of those have; `benchmark_average_interval`'s interval, clipped to [−1, 1].

    >>> arm = {"nq": {s: {"a": 1.0, "b": 0.0} for s in range(3)}, "tq": {s: {"c": 1.0, "d": 1.0} for s in range(3)}}
    >>> base = {name: {s: dict.fromkeys(qs, 0.0) for s, qs in by_seed.items()} for name, by_seed in arm.items()}
    >>> c = compare_average("inspo", arm, "static", base)
    >>> round(c.mean, 2), c.questions, c.benchmark_questions
    (0.75, 4, {'nq': 2, 'tq': 2})
    """
    if set(scores) != set(baseline_scores) or not scores:
        raise ValueError(
            f"{arm!r} and {baseline!r} need the same benchmarks (got {sorted(scores)} and {sorted(baseline_scores)})"
        )
    names = list(scores)
    for name in names:
        _checked(f"{arm} on {name}", scores[name])
        _checked(f"{baseline} on {name}", baseline_scores[name])
    seeds = sorted(set.intersection(*(set(scores[b]) & set(baseline_scores[b]) for b in names)))
    if not seeds:
        raise ValueError(f"{arm!r} and {baseline!r} share no seed that has every benchmark ({', '.join(names)})")
    matrices, counts = [], {}
    for name in names:
        _, questions, d = _paired_matrix(
            f"{arm} on {name}",
            {s: scores[name][s] for s in seeds},
            f"{baseline} on {name}",
            {s: baseline_scores[name][s] for s in seeds},
        )
        matrices.append(d)
        counts[name] = len(questions)
    interval = benchmark_average_interval(matrices, level=level)
    per_seed = np.stack([d.mean(axis=1) for d in matrices]).mean(axis=0)
    return Comparison(
        arm=arm,
        baseline=baseline,
        mean=float(interval.mean),
        low=max(float(interval.low), -1.0),
        high=min(float(interval.high), 1.0),
        level=level,
        seeds=len(seeds),
        questions=sum(counts.values()),
        per_seed={s: float(v) for s, v in zip(seeds, per_seed, strict=True)},
        method=AVERAGE_T if len(seeds) > 1 else QUESTIONS_T,
        seed_part=float(interval.seed_part),
        question_part=float(interval.question_part),
        benchmark_questions=counts,
    )


def seeds_needed(comparison: Comparison, difference: float, *, power: float = 0.8, level: float = 0.95) -> int | None:
    """Rough count of seeds (same questions) whose interval would exclude 0 with probability `power` when the true
    difference is `difference`, at the per-seed and shared-question variance `comparison` observed.

    None when it cannot be said or done: one seed shows no seed variance; every paired difference was the same
    (no variance was observed, so none can be extrapolated); or the questions alone (which more seeds do not
    shrink) already hide the difference — then more questions are needed, not more seeds.

    >>> c = Comparison("inspo", "static", 0.0, -0.1, 0.1, 0.95, 3, 200, {}, SEEDS_T, seed_part=0.01 / 3)
    >>> seeds_needed(c, 0.05)  # per-seed SD 0.1: about 8·(0.1/0.05)² ≈ 32, a little more for t
    34
    """
    if difference == 0.0 or not math.isfinite(difference):
        raise ValueError(f"difference must be a non-zero number (got {difference})")
    if not 0.0 < power < 1.0 or not 0.0 < level < 1.0:
        raise ValueError(f"power and level must lie strictly between 0 and 1 (got {power}, {level})")
    if comparison.seeds < 2:
        return None
    per_seed_variance = comparison.seed_part * comparison.seeds
    if per_seed_variance == 0.0 and comparison.question_part == 0.0:
        half = (comparison.high - comparison.low) / 2
        per_seed_variance = comparison.seeds * (half / t_quantile(0.5 + level / 2, comparison.seeds - 1)) ** 2
    if per_seed_variance == 0.0 and comparison.question_part == 0.0:
        return None
    p, z_level, z_power = 0.5 + level / 2, normal_quantile(0.5 + level / 2), normal_quantile(power)
    question_part = comparison.question_part

    def detects(seeds: int) -> bool:
        half = math.sqrt(t_quantile(p, seeds - 1) ** 2 * per_seed_variance / seeds + z_level**2 * question_part)
        return abs(difference) >= half + z_power * math.sqrt(per_seed_variance / seeds + question_part)

    if abs(difference) <= (z_level + z_power) * math.sqrt(question_part):
        return None
    low, high = 1, 2
    while not detects(high):
        low, high = high, high * 2
        if high > 1_000_000:
            return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if detects(mid) else (mid, high)
    return high


def no_seeds_needed_reason(
    comparison: Comparison, difference: float, *, power: float = 0.8, level: float = 0.95
) -> str | None:
    """Why `seeds_needed` gives no count for this comparison, in words; None when it gives one.

    >>> no_seeds_needed_reason(Comparison("inspo", "static", 0.0, 0.0, 0.0, 0.95, 2, 8, {}, SEEDS_T), 0.05)
    'every paired difference was the same, so there is no variance to extrapolate from'
    """
    if seeds_needed(comparison, difference, power=power, level=level) is not None:
        return None
    if comparison.seeds < 2:
        return "one seed shows no seed-to-seed variance to extrapolate from"
    if comparison.without_variance():
        return "every paired difference was the same, so there is no variance to extrapolate from"
    hidden = (normal_quantile(0.5 + level / 2) + normal_quantile(power)) * math.sqrt(comparison.question_part)
    if abs(difference) <= hidden:
        return "the questions alone hide such a difference: more questions are needed, not more seeds"
    return "more than a million seeds"


# ---------------------------------------------------------------------------------------------------------------------
# Coverage simulation


@dataclass(frozen=True)
class SimulatedExperiments:
    """A generative model of an arm against a baseline on EM, for checking intervals' coverage.

    Each experiment draws its questions from a benchmark (difficulty b_q ~ N(difficulty_mean, difficulty_sd²) on the
    logit scale, shared by both arms, plus the arm's own effect on that question c_q ~ N(0, question_effect_sd²)) and
    trains each arm once per seed (the arm's seed effect u_s ~ N(0, seed_sd²)); every (seed, question) answer is a
    Bernoulli EM: baseline p = σ(b_q), arm p = σ(b_q + effect + c_q + u_s).
    """

    seed_sd: float
    questions: int = 200
    difficulty_mean: float = -2.0
    difficulty_sd: float = 1.5
    effect: float = 0.1
    question_effect_sd: float = 0.5

    def true_difference(self) -> float:
        """E[arm EM − baseline EM] over seeds and the benchmark's questions (Gauss–Hermite, exact to ~1e-12)."""
        x, w = np.polynomial.hermite_e.hermegauss(120)
        w = w / w.sum()
        arm_sd = math.sqrt(self.difficulty_sd**2 + self.question_effect_sd**2 + self.seed_sd**2)
        arm = w @ _sigmoid(self.difficulty_mean + self.effect + arm_sd * x)
        base = w @ _sigmoid(self.difficulty_mean + self.difficulty_sd * x)
        return float(arm - base)

    def draw(
        self, rng: np.random.Generator, experiments: int, seeds: int, seed_noise: FloatArray | None = None
    ) -> FloatArray:
        """arm − baseline EM, shaped (experiments, seeds, questions), each value in {−1, 0, 1}. `seed_noise`
        (experiments, seeds, 1), standard normal, gives the seed effects (× seed_sd) instead of drawing them."""
        shape = (experiments, seeds, self.questions)
        difficulty = rng.normal(self.difficulty_mean, self.difficulty_sd, (experiments, 1, self.questions))
        own = rng.normal(0.0, self.question_effect_sd, (experiments, 1, self.questions))
        if seed_noise is None:
            seed_effect = rng.normal(0.0, self.seed_sd, (experiments, seeds, 1))
        else:
            seed_effect = self.seed_sd * seed_noise
        arm = rng.random(shape) < _sigmoid(difficulty + self.effect + own + seed_effect)
        base = rng.random(shape) < _sigmoid(difficulty)
        return arm.astype(np.float64) - base.astype(np.float64)


@dataclass(frozen=True)
class SimulatedBenchmarks:
    """An arm against a baseline on several benchmarks, each a `SimulatedExperiments` with its own questions, and
    one trained model per seed answering them all: a seed's effect on each benchmark is its seed_sd times a standard
    normal with correlation `seed_correlation` across benchmarks (a seed good on one tends to be good on the others).
    The estimand is the unweighted mean over benchmarks of each one's true difference."""

    benchmarks: tuple[SimulatedExperiments, ...]
    seed_correlation: float = 0.5

    def true_difference(self) -> float:
        """The mean over benchmarks of each one's E[arm EM − baseline EM]."""
        return statistics.fmean(b.true_difference() for b in self.benchmarks)

    def draw(self, rng: np.random.Generator, experiments: int, seeds: int) -> list[FloatArray]:
        """Each benchmark's arm − baseline EM, shaped (experiments, seeds, its questions), on the same seeds."""
        rho = self.seed_correlation
        shared = rng.standard_normal((experiments, seeds, 1))
        return [
            b.draw(
                rng,
                experiments,
                seeds,
                math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal(shared.shape),
            )
            for b in self.benchmarks
        ]


def _sigmoid(x: FloatArray) -> FloatArray:
    return 1.0 / (1.0 + np.exp(-x))


def pooled_bootstrap_intervals(
    differences: FloatArray, rng: np.random.Generator, *, resamples: int = 2000, level: float = 0.95
) -> tuple[FloatArray, FloatArray]:
    """`paired_bootstrap` over all (seed, question) answers pooled, for many {−1, 0, 1} matrices at once.

    Resampling n values out of three is a multinomial draw of their counts, so each experiment costs `resamples`
    draws instead of resamples × n. Returns the (low, high) percentile bounds per leading index.
    """
    pooled = differences.reshape(differences.shape[0], -1)
    n = pooled.shape[1]
    shares = np.stack([(pooled == v).mean(axis=1) for v in (-1.0, 0.0, 1.0)], axis=1)
    counts = rng.multinomial(n, shares, size=(resamples, pooled.shape[0]))
    means = np.sort((counts[..., 2] - counts[..., 0]) / n, axis=0)
    tail = (1.0 - level) / 2
    return means[int(tail * (resamples - 1))], means[int((1.0 - tail) * (resamples - 1))]
