"""Leakage between a training split and an evaluation split: exact and near-duplicate questions, on fixtures whose
answer is known by hand, and at a realistic size within the suite's time."""

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspo_engine.env.overlap import (
    NEAR_DUPLICATE_THRESHOLD,
    Overlap,
    find_overlap,
    jaccard,
    normalise_question,
    shingles,
)

# 9 normalised words, 8 bigrams: one word added at the end gives 8/9 (0.889); at 5 words, 4/5 (0.8 exactly).
NINE = "In which year did the founder of the Acme company die?"


def test_normalising_drops_case_punctuation_articles_and_spacing():
    assert normalise_question("  The  founder of ACME, Inc.?") == "founder of acme inc"


def test_an_exact_duplicate_after_normalisation_is_exact_with_similarity_one():
    found = find_overlap(["what is x", "Who wrote The Hobbit?"], ["who wrote   the hobbit"])
    assert found == [Overlap(evaluation_index=0, train_index=1, kind="exact", similarity=1.0)]


def test_a_near_duplicate_just_above_the_threshold_is_found_with_its_jaccard():
    near = NINE[:-1] + " suddenly?"  # one word appended: 8 shared bigrams of 9
    (found,) = find_overlap(["unrelated question here", NINE], [near])
    assert (found.train_index, found.kind) == (1, "near")
    assert found.similarity == pytest.approx(8 / 9)


def test_a_pair_exactly_at_the_threshold_counts():
    train = "where was the poet john keats born"  # normalised: 6 words, 5 bigrams
    evaluation = "where was poet john keats"  # 5 words, 4 bigrams, all shared: 4/5
    assert jaccard(shingles(normalise_question(train)), shingles(normalise_question(evaluation))) == 0.8
    assert find_overlap([train], [evaluation]) == [Overlap(0, 0, "near", 0.8)]


def test_a_pair_just_below_the_threshold_does_not():
    train = "where was the poet keats born"  # 5 words, 4 bigrams
    evaluation = "where was poet keats"  # 4 words, 3 bigrams: 3/4
    assert find_overlap([train], [evaluation]) == []


def test_a_changed_entity_in_a_template_question_is_not_a_duplicate():
    other = NINE.replace("Acme", "Zeta")  # word sets would give 8/10; bigrams give 6/10
    assert jaccard(shingles(normalise_question(NINE)), shingles(normalise_question(other))) == pytest.approx(0.6)
    assert find_overlap([NINE], [other]) == []


def test_unrelated_and_empty_questions_match_nothing():
    assert find_overlap(["Who painted the Mona Lisa?", "?!"], ["How tall is Everest?", "...", ""]) == []


def test_each_evaluation_question_appears_once_with_its_best_match():
    evaluation = NINE[:-1] + " suddenly?"
    far = NINE[:-1] + " suddenly and quietly?"  # 8 of 11 bigrams: 0.727, below
    closer = NINE  # 8 of 9
    found = find_overlap([far, closer, NINE[:-1] + " suddenly?"], [evaluation, NINE])
    assert found == [Overlap(0, 2, "exact", 1.0), Overlap(1, 1, "exact", 1.0)]
    (only,) = find_overlap([far, closer], [evaluation])
    assert (only.train_index, only.kind) == (1, "near")


def test_the_threshold_is_a_parameter_and_is_checked():
    near = NINE[:-1] + " suddenly?"
    assert find_overlap([NINE], [near], threshold=0.9) == []
    assert len(find_overlap([NINE], [near], threshold=0.85)) == 1
    assert NEAR_DUPLICATE_THRESHOLD == 0.8
    with pytest.raises(ValueError, match="threshold"):
        find_overlap([NINE], [near], threshold=0.0)


WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eta", "theta"]), min_size=1, max_size=9)


@settings(max_examples=150, deadline=None)
@given(st.lists(WORDS, max_size=12), st.lists(WORDS, max_size=6), st.sampled_from([0.5, 0.8, 1.0]))
def test_the_prefix_filter_finds_exactly_what_comparing_every_pair_finds(train, evaluation, threshold):
    train_texts, eval_texts = [" ".join(w) for w in train], [" ".join(w) for w in evaluation]
    expected = {}
    for i, question in enumerate(eval_texts):
        a = shingles(normalise_question(question))
        scores = [jaccard(a, shingles(normalise_question(t))) for t in train_texts]
        if scores and max(scores) >= threshold:
            expected[i] = max(scores)
    found = find_overlap(train_texts, eval_texts, threshold=threshold)
    assert {o.evaluation_index: o.similarity for o in found} == pytest.approx(expected)
    for overlap in found:
        same = normalise_question(train_texts[overlap.train_index]) == normalise_question(
            eval_texts[overlap.evaluation_index]
        )
        assert (overlap.kind == "exact") == same


def _question(rng: random.Random, vocabulary: list[str]) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 18))) + "?"


def test_it_finds_planted_duplicates_among_20k_by_2k_in_well_under_two_seconds():
    rng = random.Random(53)
    vocabulary = [f"w{n}" for n in range(3000)] + ["what", "who", "which", "of", "in", "is", "was", "did"] * 200
    train = [_question(rng, vocabulary) for _ in range(20_000)]
    evaluation = [_question(rng, vocabulary) for _ in range(2_000)]
    exact = {5: 100, 50: 1_000, 500: 10_000}
    near = {7: 200, 70: 2_000, 700: 19_999}
    for i, j in exact.items():
        evaluation[i] = train[j].upper()
    for i, j in near.items():
        evaluation[i] = train[j][:-1] + " wextra?"  # one word appended at the end
    started = time.perf_counter()
    found = find_overlap(train, evaluation)
    elapsed = time.perf_counter() - started
    assert {o.evaluation_index: (o.train_index, o.kind) for o in found} == {
        **{i: (j, "exact") for i, j in exact.items()},
        **{i: (j, "near") for i, j in near.items()},
    }
    assert elapsed < 2.0, f"{elapsed:.2f} s"
