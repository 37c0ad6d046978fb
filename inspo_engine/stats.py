"""Statistics for comparing runs on the same questions: paired bootstrap intervals; no models, no I/O."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


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
