"""Leakage between a training split and an evaluation split: exact and near-duplicate questions, on fixtures whose
answer is known by hand, and at a realistic size within the suite's time."""

import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspo_engine.env.overlap import (
    NEAR_DUPLICATE_THRESHOLD,
    Overlap,
    find_overlap,
    idf_weights,
    normalise_question,
    shingles,
    weighted_jaccard,
)

# Between one training and one evaluation question (N = 2), a shared bigram weighs ln(1 + 2/2) = ln 2 and one the
# other lacks ln(1 + 2/1) = ln 3. One word added at the end adds one bigram, so with s shared bigrams the similarity
# is s·ln 2 / (s·ln 2 + ln 3): 0.815 at s = 7 (an 8-word question), 0.791 at s = 6 (7 words).
SHARED, ONE_MORE = math.log(2), math.log(3)
EIGHT = "Which river flows through the old royal capital city?"  # normalised: 8 words, 7 bigrams
SEVEN = "Which river flows through the old capital city?"  # 7 words, 6 bigrams


def test_normalising_drops_case_punctuation_articles_and_spacing():
    assert normalise_question("  The  founder of ACME, Inc.?") == "founder of acme inc"


def test_an_exact_duplicate_after_normalisation_is_exact_with_similarity_one():
    found = find_overlap(["what is x", "Who wrote The Hobbit?"], ["who wrote   the hobbit"])
    assert found == [Overlap(evaluation_index=0, train_index=1, kind="exact", similarity=1.0)]


def test_a_near_duplicate_just_above_the_threshold_is_found_with_its_weighted_jaccard():
    (found,) = find_overlap([EIGHT], [EIGHT[:-1] + " today?"])
    assert (found.train_index, found.kind) == (0, "near")
    assert found.similarity == pytest.approx(7 * SHARED / (7 * SHARED + ONE_MORE))
    assert 0.81 < found.similarity < 0.82


def test_a_pair_just_below_the_threshold_is_not():
    evaluation = SEVEN[:-1] + " today?"
    assert 0.79 < 6 * SHARED / (6 * SHARED + ONE_MORE) < NEAR_DUPLICATE_THRESHOLD
    assert find_overlap([SEVEN], [evaluation]) == []


def test_template_questions_about_different_entities_are_not_duplicates():
    template = "Which language is spoken in the country whose capital is {}?"
    train = [template.format(city) for city in ("Vienna", "Lima", "Oslo", "Quito")] + ["Who wrote Hamlet?"]
    evaluation = template.format("Bern")
    a, b = shingles(normalise_question(train[0])), shingles(normalise_question(evaluation))
    assert len(a & b) / len(a | b) == 0.8  # unweighted, the template alone would pass
    assert find_overlap(train, [evaluation]) == []


def test_a_rewording_in_common_words_among_other_questions_is_a_near_duplicate():
    # "in what" is as common here as in any large question set, so adding "In" changes little
    train = ["What year was Barack Obama born?", *(f"In what year was treaty {n} signed?" for n in range(20))]
    (found,) = find_overlap(train, ["In what year was Barack Obama born?"])
    assert (found.train_index, found.kind) == (0, "near")
    assert found.similarity > 0.85


def test_unrelated_and_empty_questions_match_nothing():
    assert find_overlap(["Who painted the Mona Lisa?", "?!"], ["How tall is Everest?", "...", ""]) == []


def test_each_evaluation_question_appears_once_with_its_best_match():
    longer = EIGHT[:-1] + " today?"
    longest = EIGHT[:-1] + " today again?"
    found = find_overlap([longest, EIGHT, longer], [longer, EIGHT])
    assert found == [Overlap(0, 2, "exact", 1.0), Overlap(1, 1, "exact", 1.0)]
    (only,) = find_overlap([longest, EIGHT], [longer])
    assert only.kind == "near" and only.similarity > 0.8


def test_the_threshold_is_a_parameter_and_is_checked():
    near = EIGHT[:-1] + " today?"
    assert find_overlap([EIGHT], [near], threshold=0.9) == []
    assert len(find_overlap([SEVEN], [SEVEN[:-1] + " today?"], threshold=0.75)) == 1
    assert NEAR_DUPLICATE_THRESHOLD == 0.8
    with pytest.raises(ValueError, match="threshold"):
        find_overlap([EIGHT], [near], threshold=0.0)


WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eta", "theta"]), min_size=1, max_size=9)


@settings(max_examples=150, deadline=None)
@given(st.lists(WORDS, max_size=12), st.lists(WORDS, max_size=6), st.sampled_from([0.5, 0.8, 1.0]))
def test_the_prefix_filter_finds_exactly_what_comparing_every_pair_finds(train, evaluation, threshold):
    train_texts, eval_texts = [" ".join(w) for w in train], [" ".join(w) for w in evaluation]
    train_sets = [shingles(normalise_question(t)) for t in train_texts]
    eval_sets = [shingles(normalise_question(t)) for t in eval_texts]
    weights = idf_weights([*train_sets, *eval_sets])
    expected = {}
    for i, a in enumerate(eval_sets):
        scores = [weighted_jaccard(a, b, weights) for b in train_sets]
        if eval_texts[i] in train_texts:
            expected[i] = 1.0
        elif scores and max(scores) >= threshold - 1e-9:
            expected[i] = max(scores)
    found = find_overlap(train_texts, eval_texts, threshold=threshold)
    assert {o.evaluation_index: o.similarity for o in found} == pytest.approx(expected)
    for overlap in found:
        assert (overlap.kind == "exact") == (eval_texts[overlap.evaluation_index] in train_texts)


def _question(rng: random.Random, vocabulary: list[str], words: tuple[int, int] = (6, 18)) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(*words))) + "?"


@pytest.mark.slow
def test_it_finds_planted_duplicates_among_20k_by_2k_in_under_two_seconds():
    rng = random.Random(53)
    vocabulary = [f"w{n}" for n in range(3000)] + ["what", "who", "which", "of", "in", "is", "was", "did"] * 200
    train = [_question(rng, vocabulary) for _ in range(20_000)]
    evaluation = [_question(rng, vocabulary) for _ in range(2_000)]
    exact = {5: 100, 50: 1_000, 500: 10_000}
    near = {7: 200, 70: 2_000, 700: 19_999}
    for i, j in exact.items():
        evaluation[i] = train[j].upper()
    for i, j in near.items():
        train[j] = _question(rng, vocabulary, (14, 18))
        evaluation[i] = train[j][:-1] + " is?"  # one common word added at the end
    started = time.process_time()  # the CPU it takes, whatever else the machine runs meanwhile
    found = find_overlap(train, evaluation)
    elapsed = time.process_time() - started
    assert {o.evaluation_index: (o.train_index, o.kind) for o in found} == {
        **{i: (j, "exact") for i, j in exact.items()},
        **{i: (j, "near") for i, j in near.items()},
    }
    assert elapsed < 2.0, f"{elapsed:.2f} s"
