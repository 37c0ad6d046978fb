"""The training rewards: the paper's exact match and the format-aware em_format, as pure functions."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.config import RunConfig
from inspo_engine.env.rewards import REWARDS, em_format_reward, em_reward, is_valid_format, retrieved_gold

GOLD = [["Lima"]]
SEARCHED = (
    "<think>find it</think><search> Peru capital </search><information>Doc 1(Title: Peru) Lima is the capital."
    "</information>"
)


@pytest.mark.parametrize(
    ("response", "answer", "score"),
    [
        ("<think>known</think><answer> Lima </answer>", "Lima", 1.0),  # correct and well-formed
        ("Lima, I think. <answer> Lima </answer> done", "Lima", 0.8),  # correct, malformed: 1 - format_score
        ("<think>known</think><answer> Quito </answer>", "Quito", 0.2),  # wrong, well-formed: format_score
        (SEARCHED + "<think>hm</think><answer> Quito </answer>", "Quito", 0.3),  # + retrieval_score: gold in view
        ("write it inside <answer> and </answer>", "and", 0.0),  # text that merely shows the tags earns nothing
        ("The capital of Peru is Lima.", None, 0.0),  # prose: nothing
    ],
)
def test_em_format_scores_each_case_of_the_search_r1_family(response, answer, score):
    assert em_format_reward([response], golden_answers=GOLD, answers=[answer]) == [pytest.approx(score)]


def test_em_format_scores_scale_with_the_configured_weights():
    wrong = "<think>x</think><answer> Quito </answer>"
    assert em_format_reward([wrong], golden_answers=GOLD, format_score=0.1) == [pytest.approx(0.1)]
    assert em_format_reward([SEARCHED + wrong], golden_answers=GOLD, format_score=0.1, retrieval_score=0.05) == [
        pytest.approx(0.15)
    ]


@pytest.mark.parametrize(
    ("answer", "f1"),
    [
        ("Lima", None),  # correct: the full 1, no share of anything
        ("Lima is the capital of Peru", 1 / 3),  # the gold inside a sentence: F1 2·(1/5)·1 / (1/5 + 1) = 1/3
        ("Lima Peru", 2 / 3),  # shorter, closer: more
        ("capital of Peru", 0.0),  # the query echoed: nothing
        ("Cusco", 0.0),
    ],
)
def test_f1_score_pays_a_share_of_a_wrong_answers_token_f1_in_a_well_formed_reply(answer, f1):
    reply = f"{SEARCHED}<think>hm</think><answer> {answer} </answer>"
    weights = {"format_score": 0.2, "retrieval_score": 0.0, "f1_score": 0.3}
    (score,) = em_format_reward([reply], golden_answers=GOLD, answers=[answer], **weights)
    assert score == pytest.approx(1.0 if f1 is None else 0.2 + 0.3 * f1)
    (malformed,) = em_format_reward([f"I say <answer> {answer} </answer>"], golden_answers=GOLD, **weights)
    assert malformed == pytest.approx(0.8 if f1 is None else 0.0)  # the rung is for well-formed replies only
    (off,) = em_format_reward([reply], golden_answers=GOLD, answers=[answer], format_score=0.2, retrieval_score=0.0)
    assert off == pytest.approx(1.0 if f1 is None else 0.2)  # 0 by default: Search-R1's reward unchanged


def test_the_answer_the_rollout_took_wins_over_text_that_only_looks_like_one():
    """The invalid-action note or a passage can contain answer-like text; the rollout's own final answer counts."""
    response = "<think>x</think><answer> Quito </answer>"
    assert em_reward([response], golden_answers=GOLD, answers=["Lima"]) == [1.0]
    assert em_reward([response], golden_answers=GOLD) == [0.0]


def test_retrieval_credit_needs_the_gold_answer_inside_a_passage_not_in_the_models_own_text():
    assert retrieved_gold(SEARCHED, ["Lima"])
    assert not retrieved_gold("<think>Lima</think><answer>Lima</answer>", ["Lima"])
    assert not retrieved_gold("<information>Limassol is in Cyprus.</information>", ["Lima"])


def test_answer_score_is_the_first_rung_a_wrong_answer_in_a_malformed_reply():
    """Search-R1's final_format_score: any answer the rollout gave earns a little, prose without one nothing; a
    well-formed reply and a correct answer still earn more."""
    weights = {"format_score": 0.1, "answer_score": 0.05}
    replies = ["I say <answer> Quito </answer>", "The capital is Quito.", "<think>x</think><answer> Quito </answer>"]
    scores = em_format_reward(replies, golden_answers=GOLD * 3, answers=["Quito", None, "Quito"], **weights)
    assert scores == [pytest.approx(0.05), 0.0, pytest.approx(0.1)]
    assert em_format_reward([replies[0]], golden_answers=GOLD, answers=["Lima"], **weights) == [pytest.approx(0.9)]


@pytest.mark.parametrize(
    ("response", "answer", "score"),
    [
        ("<think>known</think><answer> Lima </answer>", "Lima", 0.8),  # right from memory: a malformed reply's 1 − 0.2
        (SEARCHED + "<think>hm</think><answer> Lima </answer>", "Lima", 1.0),  # right after a search: everything
        ("<think>known</think><answer> Quito </answer>", "Quito", 0.05),  # wrong from memory: answer_score only
        (SEARCHED + "<think>hm</think><answer> Quito </answer>", "Quito", 0.4),  # wrong after a search: 0.2 + 0.2
        ("<think>x</think><search> Peru </search><answer> Quito </answer>", "Quito", 0.05),  # a search never answered
    ],
)
def test_with_format_requires_search_only_a_rollout_that_searched_earns_the_protocols_credit(response, answer, score):
    """The cpu-demo's weights: a perfect reply from memory earns what a malformed one earns, a search pays."""
    weights = {"format_score": 0.2, "retrieval_score": 0.2, "answer_score": 0.05}
    (got,) = em_format_reward([response], golden_answers=GOLD, answers=[answer], format_requires_search=True, **weights)
    assert got == pytest.approx(score)
    (without,) = em_format_reward([response], golden_answers=GOLD, answers=[answer], **weights)
    changed = is_valid_format(response) and "<information>" not in response
    assert (without != got) == changed  # the option changes exactly the well-formed replies that did not search


WEIGHTS = st.fixed_dictionaries(
    {
        "format_score": st.floats(0, 0.3),
        "retrieval_score": st.floats(0, 0.3),
        "answer_score": st.floats(0, 0.25),
        "f1_score": st.floats(0, 0.39),
    }
)
"""Weights the config accepts: format + retrieval + f1 stay below 1 (see the config test below)."""


@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=20)), WEIGHTS)
def test_em_format_is_bounded_and_a_correct_answer_always_beats_a_wrong_one(response, answer, weights):
    (score,) = em_format_reward([response], golden_answers=GOLD, answers=[answer], **weights)
    assert 0.0 <= score <= 1.0
    (right,) = em_format_reward([response], golden_answers=GOLD, answers=["Lima"], **weights)
    (wrong,) = em_format_reward([response], golden_answers=GOLD, answers=["Quito"], **weights)
    assert right > wrong


def test_the_paper_preset_keeps_pure_exact_match_and_the_cpu_demo_uses_em_format():
    from inspo_engine.presets import preset

    assert RunConfig().env.reward == "em" and preset("paper").env.reward == "em"
    assert preset("cpu-demo").env.reward == "em_format"
    assert set(REWARDS) == {"em", "em_format"}


def test_reward_weights_are_bounded_in_the_config():
    with pytest.raises(ValueError, match=r"env\.format_score"):
        RunConfig.from_dict({"env": {"format_score": 0.9}})
    with pytest.raises(ValueError, match=r"env\.answer_score: must be ≤ format_score"):
        RunConfig.from_dict({"env": {"format_score": 0.1, "answer_score": 0.2}})
    with pytest.raises(ValueError, match=r"env\.f1_score: .*\(1\.1\) must stay below 1"):
        RunConfig.from_dict({"env": {"format_score": 0.3, "retrieval_score": 0.4, "f1_score": 0.4}})
    assert RunConfig.from_dict({"env": {"format_score": 0.2, "retrieval_score": 0.2, "f1_score": 0.5}})
