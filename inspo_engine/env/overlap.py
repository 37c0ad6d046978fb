"""Question overlap between a training split and an evaluation split, exact and near-duplicate; it knows texts only,
no files, datasets or runs.

A benchmark question that was also in training measures memory, not search. Two questions overlap when:

- **exact**: their normalised texts are equal (`normalise_question`: the SQuAD normalisation the EM reward uses:
  lower case, no punctuation, no articles, white space collapsed);
- **near**: the weighted Jaccard similarity of their word bigrams is at least `NEAR_DUPLICATE_THRESHOLD` (0.8),
  each bigram weighted by its rarity over both splits' questions, idf = ln(1 + N / df).

Why word bigrams. Questions are short (NQ about 9 words, HotpotQA about 18): over word 3-grams, the usual shingle
for documents, one word added to a 5-word question already falls to 0.75. Bigrams keep the word order ("who killed
X" is not "X killed who") and a one-word question is its own single shingle, so it only ever matches exactly.

Why weighted. Benchmarks are full of template questions that differ in one entity: "Which language is spoken in the
country whose capital is Bern?" and "… is Vienna?" share 8 of their 10 bigrams, an unweighted Jaccard of 0.8, yet
are different questions (the built-in set's test split has 51 of 195 such pairs with its training split, though its
splits share no country). Weighted by rarity, the template's common bigrams count little and the entity's rare ones
much (0.53 for that pair), while two questions that differ only in common words ("What year was Obama born?" / "In
what year was Obama born?") stay near 0.9. So a near duplicate is a question that says the same rare things.

Finding the pairs is not a quadratic loop: it is the prefix filter of set-similarity joins (Chaudhuri et al. 2006;
Bayardo et al. 2007, "All-Pairs"), in its weighted form. With each question's bigrams sorted rarest first, two sets
of weighted Jaccard ≥ t must share a bigram among the shortest prefix of each whose rest weighs less than t times
the set's weight; an inverted index over the training prefixes yields the candidates, a weight filter (t·w(x) ≤
w(y) ≤ w(x)/t) drops most of them, and each survivor is checked exactly. Unlike MinHash, it misses no pair and needs
no seed.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
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


def idf_weights(questions: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each shingle's weight ln(1 + N / df): N questions, df of them hold it. Never zero, so a shingle every question
    holds still counts a little (ln 2). Rarest first, ties in order of first appearance.

    >>> {s: round(w, 3) for s, w in idf_weights([frozenset({"a"}), frozenset({"a", "b"})]).items()}
    {'b': 1.099, 'a': 0.693}
    """
    frequency = Counter(itertools.chain.from_iterable(questions))
    total = len(questions)
    return {shingle: math.log1p(total / frequency[shingle]) for shingle in sorted(frequency, key=frequency.__getitem__)}


def weighted_jaccard(a: frozenset[str], b: frozenset[str], weights: Mapping[str, float]) -> float:
    """w(a ∩ b) / w(a ∪ b), 0.0 for two empty sets; with every weight 1 it is the plain Jaccard.

    >>> weighted_jaccard(frozenset("abcd"), frozenset("abce"), dict.fromkeys("abcde", 1.0))
    0.6
    >>> weighted_jaccard(frozenset("ab"), frozenset("ac"), {"a": 3.0, "b": 1.0, "c": 1.0})
    0.6
    """
    union = sum(weights[s] for s in a | b)
    return sum(weights[s] for s in a & b) / union if union else 0.0


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
    eval_texts = [normalise_question(text) for text in evaluation]
    rest: list[tuple[int, str]] = []
    for index, text in enumerate(eval_texts):
        if text in first_train:
            found[index] = Overlap(index, first_train[text], "exact", 1.0)
        elif text:
            rest.append((index, text))
    if rest:
        found.update(_near_duplicates(train_texts, eval_texts, rest, threshold))
    return [found[index] for index in sorted(found)]


def _near_duplicates(
    train_texts: list[str], eval_texts: list[str], rest: list[tuple[int, str]], threshold: float
) -> dict[int, Overlap]:
    """The best training match at weighted Jaccard ≥ threshold for each (index, normalised text) of `rest`, by the
    weighted prefix filter; the weights count every question of both splits."""
    train_sets = [shingles(text) for text in train_texts]
    eval_sets = [shingles(text) for text in eval_texts]
    weights = idf_weights([*train_sets, *eval_sets])
    # The global order: heaviest (rarest) first, as `idf_weights` lists them. From here on a shingle is its rank, and
    # a question the tuple of its ranks in that order.
    rank = {shingle: position for position, shingle in enumerate(weights)}
    weight = list(weights.values())
    train_ranks = [tuple(sorted(map(rank.__getitem__, shingle_set))) for shingle_set in train_sets]
    train_weight = [sum(map(weight.__getitem__, ranks)) for ranks in train_ranks]
    postings: dict[int, list[int]] = {}
    for train_index, ranks in enumerate(train_ranks):
        for token in _prefix(ranks, weight, train_weight[train_index] * threshold):
            postings.setdefault(token, []).append(train_index)

    found: dict[int, Overlap] = {}
    for eval_index, _ in rest:
        ranks = tuple(sorted(map(rank.__getitem__, eval_sets[eval_index])))
        total = sum(map(weight.__getitem__, ranks))
        low, high = threshold * total * (1 - _EPSILON), total / threshold * (1 + _EPSILON)
        candidates: set[int] = set()
        for token in _prefix(ranks, weight, total * threshold):
            candidates.update(postings.get(token, ()))
        best: tuple[float, int] | None = None
        mine = frozenset(ranks)
        for train_index in sorted(candidates):
            if not low <= train_weight[train_index] <= high:
                continue
            shared = sum(map(weight.__getitem__, mine.intersection(train_ranks[train_index])))
            similarity = shared / (total + train_weight[train_index] - shared)
            if similarity >= threshold - _EPSILON and (best is None or similarity > best[0]):
                best = (similarity, train_index)
        if best is not None:
            found[eval_index] = Overlap(eval_index, best[1], "near", best[0])
    return found


def _prefix(ranks: tuple[int, ...], weight: list[float], bound: float) -> tuple[int, ...]:
    """The question's rarest shingles (`ranks`, rarest first) up to the first point where what is left weighs less
    than `bound` (the threshold times the question's weight): two questions whose prefixes share no shingle cannot
    reach the threshold together."""
    left = sum(map(weight.__getitem__, ranks))
    for length, token in enumerate(ranks, start=1):
        left -= weight[token]
        if left < bound * (1 - _EPSILON) - _EPSILON:
            return ranks[:length]
    return ranks
