"""How alike the living instructions are, and when the population has collapsed: pairwise embedding cosine, a
lexical overlap, the number of distinct strategies and the entropy of the sampling distribution, measured on each
population record, plus the alarm that trips when those stay collapsed for several steps. It knows texts, vectors and
probabilities; it knows nothing about the schedule, the policy or the optimizer.

The rules, exactly:

- **cosine**: every pair of living instructions, embedded with all-MiniLM-L6-v2 (unit-normalised, so cosine is the
  dot product); mean, min and max over the pairs.
- **lexical**: the Jaccard overlap of two instructions' sets of lower-cased words (`\\w+`), averaged over the pairs.
- **strategies**: instructions are the same strategy when their cosine is at least `strategy_cosine`, and strategies
  are the connected groups of that relation (single linkage): three paraphrases of one idea count once.
- **entropy**: the Shannon entropy (nats) of the softmax sampling distribution, and the same divided by ln N — 1
  when sampling is uniform, near 0 when one instruction takes every question.
- **collapse**: a population of at least two looks collapsed when every pair is at least `collapse_cosine` alike or
  its normalised entropy is at most `collapse_entropy`. The alarm trips when it looked collapsed at every record of
  `collapse_steps` consecutive steps, and clears at the first record that does not. A population of one (the static
  baseline, or successive halving's end just before an evolution) is not judged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from .events import Diversity, Event, PopulationCollapsed, PopulationDiversity, PopulationRecovered

Vector = Sequence[float]
Embed = Callable[[Sequence[str]], list[list[float]]]
"""Texts → one unit-length vector per text."""

_WORD = re.compile(r"\w+")


def pairwise_cosines(vectors: Sequence[Vector]) -> list[float]:
    """The cosine of every pair i < j (vectors need not be unit length).

    >>> pairwise_cosines([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    [0.0, 0.7071067811865475, 0.7071067811865475]
    >>> pairwise_cosines([[1.0, 0.0]])
    []
    """
    norms = [math.sqrt(sum(x * x for x in v)) or 1.0 for v in vectors]
    return [
        sum(a * b for a, b in zip(vectors[i], vectors[j], strict=True)) / (norms[i] * norms[j])
        for i in range(len(vectors))
        for j in range(i + 1, len(vectors))
    ]


def word_set(text: str) -> frozenset[str]:
    """The lower-cased words of a text.

    >>> sorted(word_set("Search, then <answer> answer </answer>."))
    ['answer', 'search', 'then']
    """
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical.

    >>> jaccard(frozenset({"a", "b"}), frozenset({"b", "c"}))
    0.3333333333333333
    """
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def mean_pairwise_jaccard(texts: Sequence[str]) -> float | None:
    """The mean Jaccard overlap of the word sets over every pair; None for fewer than two texts.

    >>> mean_pairwise_jaccard(["think then answer", "think then search", "think then answer"])
    0.6666666666666666
    """
    sets = [word_set(t) for t in texts]
    pairs = [jaccard(sets[i], sets[j]) for i in range(len(sets)) for j in range(i + 1, len(sets))]
    return sum(pairs) / len(pairs) if pairs else None


def strategy_count(vectors: Sequence[Vector], threshold: float) -> int:
    """How many groups the vectors form when each pair with cosine ≥ threshold is joined (single linkage).

    >>> strategy_count([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]], 0.9)
    2
    >>> strategy_count([], 0.9)
    0
    """
    parent = list(range(len(vectors)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    cosines = iter(pairwise_cosines(vectors))
    for i in range(len(vectors)):
        for j in range(i + 1, len(vectors)):
            if next(cosines) >= threshold:
                parent[root(j)] = root(i)
    return len({root(i) for i in range(len(vectors))})


def sampling_entropy(probabilities: Sequence[float]) -> tuple[float, float | None]:
    """(Shannon entropy in nats, entropy / ln N) of a distribution; the second is None for fewer than two outcomes.

    >>> sampling_entropy([0.25, 0.25, 0.25, 0.25])
    (1.3862943611198906, 1.0)
    >>> sampling_entropy([1.0, 0.0])
    (0.0, 0.0)
    >>> sampling_entropy([1.0])
    (0.0, None)
    """
    entropy = -sum(p * math.log(p) for p in probabilities if p > 0)
    entropy = max(0.0, entropy)
    n = len(probabilities)
    return entropy, (min(1.0, entropy / math.log(n)) if n >= 2 else None)


def measure(
    texts: Sequence[str], vectors: Sequence[Vector], probabilities: Sequence[float], *, strategy_cosine: float
) -> Diversity:
    """Every measure of one population: its members' texts, their embeddings and sampling probabilities, in order.

    >>> d = measure(["a b", "a c"], [[1.0, 0.0], [0.0, 1.0]], [0.5, 0.5], strategy_cosine=0.9)
    >>> (d.size, d.cosine_mean, d.jaccard_mean, d.strategies, d.entropy_normalised)
    (2, 0.0, 0.3333333333333333, 2, 1.0)
    """
    cosines = pairwise_cosines(vectors)
    entropy, normalised = sampling_entropy(probabilities)
    return Diversity(
        size=len(texts),
        cosine_mean=sum(cosines) / len(cosines) if cosines else None,
        cosine_min=min(cosines) if cosines else None,
        cosine_max=max(cosines) if cosines else None,
        jaccard_mean=mean_pairwise_jaccard(texts),
        strategies=strategy_count(vectors, strategy_cosine),
        entropy=entropy,
        entropy_normalised=normalised,
    )


def collapse_reasons(diversity: Diversity, *, cosine: float, entropy: float) -> list[str] | None:
    """Why a population looks collapsed: 'cosine' (every pair at least `cosine` alike) and/or 'entropy' (normalised
    sampling entropy at most `entropy`); [] when it does not, None when it is not judged (fewer than two members).

    >>> collapse_reasons(Diversity(3, 0.97, 0.96, 0.99, 0.9, 1, 0.01, 0.01), cosine=0.95, entropy=0.05)
    ['cosine', 'entropy']
    >>> collapse_reasons(Diversity(3, 0.5, 0.2, 0.99, 0.4, 2, 1.0, 0.9), cosine=0.95, entropy=0.05)
    []
    """
    if diversity.size < 2 or diversity.cosine_min is None or diversity.entropy_normalised is None:
        return None
    reasons = []
    if diversity.cosine_min >= cosine:
        reasons.append("cosine")
    if diversity.entropy_normalised <= entropy:
        reasons.append("entropy")
    return reasons


class CollapseMonitor:
    """Counts the consecutive steps a population looked collapsed and says when the alarm trips or clears; its
    state is part of the run's saved state, so a resumed run trips exactly where an uninterrupted one would."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.streak = 0
        self.streak_start: int | None = None
        self.last_step: int | None = None
        self.collapsed_since: int | None = None

    def observe(self, step: int, reasons: list[str] | None) -> str | None:
        """One record's verdict (from `collapse_reasons`) → 'collapsed' when the alarm trips, 'recovered' when it
        clears, else None.

        >>> monitor = CollapseMonitor(steps=2)
        >>> [monitor.observe(s, r) for s, r in [(1, ["cosine"]), (1, ["cosine"]), (2, None), (3, ["cosine"])]]
        [None, None, None, 'collapsed']
        >>> monitor.observe(4, []), monitor.collapsed_since
        ('recovered', None)
        """
        if reasons is None:
            return None
        if not reasons:
            was = self.collapsed_since is not None
            self.streak, self.streak_start, self.last_step, self.collapsed_since = 0, None, None, None
            return "recovered" if was else None
        if step != self.last_step:
            self.streak += 1
            self.last_step = step
            if self.streak_start is None:
                self.streak_start = step
        if self.collapsed_since is None and self.streak >= self.steps:
            self.collapsed_since = self.streak_start
            return "collapsed"
        return None

    def to_state(self) -> dict[str, Any]:
        return {
            "streak": self.streak,
            "streak_start": self.streak_start,
            "last_step": self.last_step,
            "collapsed_since": self.collapsed_since,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.streak = int(state["streak"])
        self.streak_start = state["streak_start"]
        self.last_step = state["last_step"]
        self.collapsed_since = state["collapsed_since"]


def minilm_embed(texts: Sequence[str]) -> list[list[float]]:
    """all-MiniLM-L6-v2 as the dense retriever loads it (the same model object in the process, loaded on first use
    and never downloaded), unit-normalised."""
    from .env.retrievers import embed_texts

    return [[float(x) for x in row] for row in embed_texts(texts)]


class DiversityTracker:
    """Measures each population record and watches for collapse. Embeddings are computed once per text, on first
    need, so a population that did not change costs only the pairwise arithmetic."""

    def __init__(
        self,
        *,
        strategy_cosine: float,
        collapse_cosine: float,
        collapse_entropy: float,
        collapse_steps: int,
        embed: Embed = minilm_embed,
    ) -> None:
        self.strategy_cosine = strategy_cosine
        self.collapse_cosine = collapse_cosine
        self.collapse_entropy = collapse_entropy
        self.embed = embed
        self.monitor = CollapseMonitor(collapse_steps)
        self._vectors: dict[str, list[float]] = {}

    def vectors(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self.embed(missing), strict=True))
        return [self._vectors[t] for t in texts]

    def observe(self, step: int, reason: str, texts: Sequence[str], probabilities: Sequence[float]) -> list[Event]:
        """The record's PopulationDiversity, followed by PopulationCollapsed or PopulationRecovered when the alarm
        trips or clears at it."""
        diversity = measure(texts, self.vectors(texts), probabilities, strategy_cosine=self.strategy_cosine)
        events: list[Event] = [PopulationDiversity(step=step, reason=reason, **asdict(diversity))]
        reasons = collapse_reasons(diversity, cosine=self.collapse_cosine, entropy=self.collapse_entropy)
        since = self.monitor.collapsed_since
        change = self.monitor.observe(step, reasons)
        if change == "collapsed":
            events.append(
                PopulationCollapsed(
                    step=step,
                    since_step=step if self.monitor.collapsed_since is None else self.monitor.collapsed_since,
                    steps=self.monitor.streak,
                    reasons=list(reasons or []),
                    cosine_min=diversity.cosine_min,
                    entropy_normalised=diversity.entropy_normalised,
                    collapse_cosine=self.collapse_cosine,
                    collapse_entropy=self.collapse_entropy,
                )
            )
        elif change == "recovered":
            events.append(
                PopulationRecovered(
                    step=step,
                    since_step=since if since is not None else step,
                    cosine_min=diversity.cosine_min,
                    entropy_normalised=diversity.entropy_normalised,
                )
            )
        return events
