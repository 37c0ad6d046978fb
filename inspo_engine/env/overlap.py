"""Question overlap between a training split and an evaluation split, exact and near-duplicate; it knows texts only,
no files, datasets or runs.

A benchmark question that was also in training measures memory, not search. Two questions overlap when:

- **exact**: their normalised texts are equal (`normalise_question`: the SQuAD normalisation the EM reward uses:
  lower case, no punctuation, no articles, white space collapsed);
- **near**: the Jaccard similarity of their word-bigram sets is at least `NEAR_DUPLICATE_THRESHOLD` (0.8).

Why word bigrams. Questions are short (NQ about 9 words, HotpotQA about 18). Over word 3-grams, the usual shingle for
documents, one word added to the end of a 5-word question already falls to 0.75 (3 of 4 trigrams). Over plain word
sets, two template questions that differ in one entity ("in which year did the founder of the Acme company die" and
the same of Zeta) reach 0.8 and would count as one question. Over bigrams, a word added or dropped at either end of a
question of 5 words or more stays at or above 0.8, while a changed word in the middle breaks two bigrams (0.6 for the
template pair above). A one-word question is its own single shingle, so it only ever matches exactly.

Finding the pairs is not a quadratic loop: it is the prefix filter of set-similarity joins (Chaudhuri et al. 2006;
Bayardo et al. 2007, "All-Pairs"). With each shingle set sorted by a global order (rarest shingle first), two sets of
Jaccard ≥ t must share a shingle among the first |x| - ceil(t·|x|) + 1 of each; an inverted index over the training
prefixes yields the candidates, a size filter (t·|x| ≤ |y| ≤ |x|/t) drops most of them, and each survivor is checked
with the exact Jaccard. Unlike MinHash, this misses no pair and needs no seed.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from inspo_engine.env.rewards import normalize_answer

NEAR_DUPLICATE_THRESHOLD = 0.8
SHINGLE_WORDS = 2  # word bigrams; `shingles` is written for this size
_EPSILON = 1e-9  # floating point slack: every bound below errs towards more candidates, never fewer

OverlapKind = Literal["exact", "near"]


@dataclass(frozen=True)
class Overlap:
    """An evaluation question that was also in training: its best match there, and how alike they are (1.0 = exact)."""

    evaluation_index: int
    train_index: int
    kind: OverlapKind
    similarity: float


def normalise_question(text: str) -> str:
    """The text two questions are compared by: the SQuAD normalisation of the EM reward (`normalize_answer`).

    >>> normalise_question("  Who wrote 'The Hobbit'? ")
    'who wrote hobbit'
    """
    return normalize_answer(text)


def shingles(normalised: str) -> frozenset[str]:
    """The word bigrams of a normalised question; a one-word question is its own shingle, an empty one has none.

    >>> sorted(shingles("who wrote hobbit"))
    ['who wrote', 'wrote hobbit']
    >>> shingles("hobbit")
    frozenset({'hobbit'})
    """
    words = normalised.split()
    if len(words) < SHINGLE_WORDS:
        return frozenset(words)
    return frozenset([first + " " + second for first, second in itertools.pairwise(words)])


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|, 0.0 for two empty sets.

    >>> jaccard(frozenset("abcd"), frozenset("abce"))
    0.6
    """
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _prefix_length(size: int, threshold: float) -> int:
    """How many of a set's rarest shingles to index or probe so that no pair of Jaccard ≥ threshold is missed."""
    return size - math.ceil(threshold * size - _EPSILON) + 1


def find_overlap(
    train: Sequence[str], evaluation: Sequence[str], *, threshold: float = NEAR_DUPLICATE_THRESHOLD
) -> list[Overlap]:
    """Each evaluation question that is also in training, once, with its best match, in evaluation order.

    An exact match wins over any near one (the first such training question); otherwise the most similar training
    question at or above `threshold`, the earliest on ties. Questions that normalise to nothing match nothing.

    >>> find_overlap(["Who wrote The Hobbit?", "Where is Lima?"], ["who wrote the hobbit", "What is Lima?"])
    [Overlap(evaluation_index=0, train_index=0, kind='exact', similarity=1.0)]
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    train_texts = [normalise_question(text) for text in train]
    first_train: dict[str, int] = {}
    for index, text in enumerate(train_texts):
        if text:
            first_train.setdefault(text, index)
    found: dict[int, Overlap] = {}
    rest: list[tuple[int, str]] = []
    for index, raw in enumerate(evaluation):
        text = normalise_question(raw)
        if text in first_train:
            found[index] = Overlap(index, first_train[text], "exact", 1.0)
        elif text:
            rest.append((index, text))
    if rest:
        found.update(_near_duplicates(train_texts, rest, threshold))
    return [found[index] for index in sorted(found)]


def _near_duplicates(train_texts: list[str], evaluation: list[tuple[int, str]], threshold: float) -> dict[int, Overlap]:
    """The best training match at Jaccard ≥ threshold for each (index, normalised text), by the prefix filter."""
    train_sets = [shingles(text) for text in train_texts]
    eval_sets = [(index, shingles(text)) for index, text in evaluation]
    frequency: Counter[str] = Counter()
    for shingle_set in train_sets:
        frequency.update(shingle_set)
    for _, shingle_set in eval_sets:
        frequency.update(shingle_set)
    # The global order: rarest first, ties in order of first appearance (a Counter keeps it), so runs agree.
    rank = {shingle: position for position, shingle in enumerate(sorted(frequency, key=frequency.__getitem__))}

    postings: dict[int, list[int]] = {}
    for train_index, shingle_set in enumerate(train_sets):
        ordered = sorted(map(rank.__getitem__, shingle_set))
        for token in ordered[: _prefix_length(len(ordered), threshold)]:
            postings.setdefault(token, []).append(train_index)

    found: dict[int, Overlap] = {}
    for eval_index, shingle_set in eval_sets:
        size = len(shingle_set)
        ordered = sorted(map(rank.__getitem__, shingle_set))
        low, high = threshold * size - _EPSILON, size / threshold + _EPSILON
        candidates: set[int] = set()
        for token in ordered[: _prefix_length(size, threshold)]:
            candidates.update(postings.get(token, ()))
        best: tuple[float, int] | None = None
        for train_index in sorted(candidates):
            if not low <= len(train_sets[train_index]) <= high:
                continue
            similarity = jaccard(shingle_set, train_sets[train_index])
            if similarity >= threshold - _EPSILON and (best is None or similarity > best[0]):
                best = (similarity, train_index)
        if best is not None:
            found[eval_index] = Overlap(eval_index, best[1], "near", best[0])
    return found
