"""Reward functions: pure `(completions, **kwargs) -> list[float]` over final answers; they know no model or tokens."""

from __future__ import annotations

import itertools
import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, collapse white space.

    >>> normalize_answer("  The  Eiffel-Tower! ")
    'eiffeltower'
    >>> normalize_answer("An Apple a day")
    'apple day'
    """
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(response: str) -> str | None:
    """The content of the last complete <answer>…</answer>, or None.

    >>> extract_answer("<think>hm</think> <answer> Paris </answer>")
    'Paris'
    >>> extract_answer("<answer>unfinished") is None
    True
    """
    found = _ANSWER.findall(response)
    return found[-1].strip() if found else None


def exact_match(prediction: str | None, golden_answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0 (None scores 0).

    >>> exact_match("the Beatles", ["Beatles"])
    1.0
    >>> exact_match("Beatles band", ["Beatles"])
    0.0
    """
    if prediction is None:
        return 0.0
    guess = normalize_answer(prediction)
    return float(any(guess == normalize_answer(gold) for gold in golden_answers))


def f1(prediction: str | None, golden_answers: Sequence[str]) -> float:
    """Best token-level F1 of the normalised prediction against any gold answer.

    >>> round(f1("Paris France", ["Paris"]), 3)
    0.667
    >>> f1(None, ["Paris"])
    0.0
    """
    if prediction is None:
        return 0.0
    guess = normalize_answer(prediction).split()
    best = 0.0
    for gold in golden_answers:
        truth = normalize_answer(gold).split()
        common = sum((Counter(guess) & Counter(truth)).values())
        if common:
            precision, recall = common / len(guess), common / len(truth)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


_BLOCK = re.compile(r"<(think|search|information|answer)>(.*?)</\1>", re.S)
_ANY_TAG = re.compile(r"</?(think|search|information|answer)>")


def is_valid_format(response: str) -> bool:
    """Search-R1's sequence rule: the response is nothing but tag blocks separated by white space; it opens with
    `<think>`, every `<search>` is answered by an `<information>` block, no block nests another, and exactly one
    `<answer>` ends it.

    >>> is_valid_format("<think>x</think><search>q</search><information>d</information><answer>y</answer>")
    True
    >>> is_valid_format("<think>x</think> y")
    False
    >>> is_valid_format("To answer, write it inside <answer> and </answer>")
    False
    >>> is_valid_format("<think>x</think> so <answer>y</answer>")
    False
    """
    kinds: list[str] = []
    position = 0
    for block in _BLOCK.finditer(response):
        if response[position : block.start()].strip() or _ANY_TAG.search(block.group(2)):
            return False
        kinds.append(block.group(1))
        position = block.end()
    if response[position:].strip() or not kinds or kinds[0] != "think" or kinds[-1] != "answer":
        return False
    searches_answered = all(after == "information" for kind, after in itertools.pairwise(kinds) if kind == "search")
    return kinds.count("answer") == 1 and searches_answered


def em_reward(
    completions: Sequence[str],
    *,
    golden_answers: Sequence[Sequence[str]],
    answers: Sequence[str | None] | None = None,
    **_: object,
) -> list[float]:
    """The paper's training reward: exact match of each final answer; a missing answer scores 0. `answers` are the
    final answers the rollout took (default: the last `<answer>` of each completion).

    >>> em_reward(["<answer> Paris </answer>", "Paris"], golden_answers=[["paris"], ["paris"]])
    [1.0, 0.0]
    """
    if answers is None:
        answers = [extract_answer(c) for c in completions]
    return [exact_match(a, golds) for a, golds in zip(answers, golden_answers, strict=True)]


def f1_reward(completions: Sequence[str], *, golden_answers: Sequence[Sequence[str]], **_: object) -> list[float]:
    """Token F1 of each completion's final answer (for reporting).

    >>> f1_reward(["<answer> Paris France </answer>"], golden_answers=[["Paris"]])[0] > 0.6
    True
    """
    return [f1(extract_answer(c), golds) for c, golds in zip(completions, golden_answers, strict=True)]


def format_reward(completions: Sequence[str], **_: object) -> list[float]:
    """1.0 for a well-formed trajectory (for reporting).

    >>> format_reward(["<think>a</think><answer>b</answer>", "b"])
    [1.0, 0.0]
    """
    return [float(is_valid_format(c)) for c in completions]


_INFORMATION = re.compile(r"<information>(.*?)</information>", re.S)
_SEARCH_ANSWERED = re.compile(r"<search>.*?</search>\s*<information>", re.S)


def searched(response: str) -> bool:
    """Whether the response holds a search that the environment answered with passages.

    >>> searched("<think>x</think><search>q</search>\\n<information>d</information><answer>y</answer>")
    True
    >>> searched("<think>x</think><answer>y</answer>"), searched("<search>q</search> then nothing")
    (False, False)
    """
    return _SEARCH_ANSWERED.search(response) is not None


def retrieved_gold(response: str, golden_answers: Sequence[str]) -> bool:
    """Whether any `<information>` block of the response contains a gold answer (normalised, as a substring).

    >>> retrieved_gold("<search>q</search><information>Doc 1(Title: Peru) Lima is the capital.</information>", ["Lima"])
    True
    >>> retrieved_gold("<answer>Lima</answer>", ["Lima"])
    False
    """
    seen = " ".join(normalize_answer(block) for block in _INFORMATION.findall(response))
    return any(f" {normalize_answer(gold)} " in f" {seen} " for gold in golden_answers if normalize_answer(gold))


_SEARCH = re.compile(r"<search>(.*?)</search>", re.S)


def answers_with_query(response: str) -> bool:
    """Whether the final answer is, once normalised, one of the response's own search queries: the echo a small
    policy falls into, right only where the query happens to name the answer.

    >>> answers_with_query("<search> Benin </search><information>d</information><answer>benin</answer>")
    True
    >>> answers_with_query("<search> capital of Peru </search><information>d</information><answer>Lima</answer>")
    False
    >>> answers_with_query("<answer>Lima</answer>")
    False
    """
    answer = extract_answer(response)
    if answer is None:
        return False
    return normalize_answer(answer) in {normalize_answer(query) for query in _SEARCH.findall(response)}


def em_format_reward(
    completions: Sequence[str],
    *,
    golden_answers: Sequence[Sequence[str]],
    answers: Sequence[str | None] | None = None,
    format_score: float = 0.2,
    retrieval_score: float = 0.1,
    answer_score: float = 0.0,
    format_requires_search: bool = False,
    f1_score: float = 0.0,
    **_: object,
) -> list[float]:
    """Exact match with partial credit for the protocol, in the spirit of Search-R1's `qa_em_format`:

    - a correct answer scores 1 in a well-formed trajectory and 1 − format_score in a malformed one;
    - a wrong (or missing) answer in a well-formed trajectory scores format_score, plus retrieval_score when a
      retrieved passage held a gold answer, plus f1_score × the answer's token F1 against the gold answers (0 by
      default: a wrong answer that names part of the gold one, or the gold one inside a sentence, earns a share);
    - a wrong answer in a malformed trajectory scores answer_score (Search-R1's `final_format_score`, 0 by
      default, so text that merely contains the tags earns nothing), a malformed one with no answer 0.

    With `format_requires_search`, a trajectory counts as well-formed here only if it also searched (a `<search>`
    answered by `<information>`): answering from memory in perfect form then earns what a malformed answer earns, and
    the protocol's credit goes to the rollouts that used the tool.

    `answers` are the final answers the rollout took (default: the last `<answer>` of each completion).

    >>> well_formed = ["<think>x</think><answer>Lima</answer>", "<think>x</think><answer>Quito</answer>"]
    >>> em_format_reward([*well_formed, "Lima", "<answer>Quito"], golden_answers=[["Lima"]] * 4)
    [1.0, 0.2, 0.0, 0.0]
    >>> em_format_reward(["<think>x</think> <answer>Lima</answer> extra"], golden_answers=[["Lima"]])
    [0.8]
    >>> em_format_reward(["I say <answer>Quito</answer>", "Quito"], golden_answers=[["Lima"]] * 2, answer_score=0.1)
    [0.1, 0.0]
    >>> searched = "<think>x</think><search>Peru</search><information>Quito is north.</information>"
    >>> em_format_reward([*well_formed, searched + "<answer>Quito</answer>"], golden_answers=[["Lima"]] * 3,
    ...                  answer_score=0.05, format_requires_search=True)
    [0.8, 0.05, 0.2]
    >>> sentence = "<think>x</think><answer>Lima is the capital of Peru</answer>"
    >>> [round(s, 3) for s in em_format_reward([sentence, well_formed[1]], golden_answers=[["Lima"]] * 2, f1_score=0.3)]
    [0.3, 0.2]
    """
    if answers is None:
        answers = [extract_answer(c) for c in completions]
    scores = []
    for completion, answer, golds in zip(completions, answers, golden_answers, strict=True):
        well_formed = is_valid_format(completion) and (not format_requires_search or searched(completion))
        if exact_match(answer, golds):
            scores.append(1.0 if well_formed else 1.0 - format_score)
        elif well_formed:
            retrieval = retrieval_score if retrieved_gold(completion, golds) else 0.0
            scores.append(format_score + retrieval + f1_score * f1(answer, golds))
        else:
            scores.append(answer_score if answer is not None else 0.0)
    return scores


REWARDS = {"em": em_reward, "em_format": em_format_reward}
"""The training rewards a run config can name (`env.reward`)."""


class RewardParts(NamedTuple):
    """One reward split in two parts that add up to it: what the trajectory earned for its form (the protocol's
    credit) and what it earned for what its answer says."""

    format: float
    correct: float


def em_parts(
    completions: Sequence[str],
    *,
    golden_answers: Sequence[Sequence[str]],
    answers: Sequence[str | None] | None = None,
    **_: object,
) -> list[RewardParts]:
    """`em_reward` split: all of it is correctness.

    >>> em_parts(["<answer> Paris </answer>"], golden_answers=[["paris"]])
    [RewardParts(format=0.0, correct=1.0)]
    """
    return [RewardParts(0.0, r) for r in em_reward(completions, golden_answers=golden_answers, answers=answers)]


def em_format_parts(
    completions: Sequence[str],
    *,
    golden_answers: Sequence[Sequence[str]],
    answers: Sequence[str | None] | None = None,
    format_score: float = 0.2,
    retrieval_score: float = 0.1,
    answer_score: float = 0.0,
    format_requires_search: bool = False,
    f1_score: float = 0.0,
    **_: object,
) -> list[RewardParts]:
    """`em_format_reward` split into format and correctness. Correctness is what the answer earns: 1 − format_score
    for a correct answer (whatever the form), and a wrong answer's F1 share (f1_score × F1, well-formed trajectories
    only). Format is the rest: format_score for a well-formed trajectory (correct or not), the retrieval credit, and
    answer_score for a malformed one that answered. A run whose reward rises while its correctness part stays at 0
    learnt the form only.

    >>> well_formed = ["<think>x</think><answer>Lima</answer>", "<think>x</think><answer>Quito</answer>"]
    >>> malformed = ["<think>x</think> <answer>Lima</answer> extra", "<answer>Quito"]
    >>> parts = em_format_parts([*well_formed, *malformed], golden_answers=[["Lima"]] * 4)
    >>> [(round(p.format, 3), round(p.correct, 3)) for p in parts]
    [(0.2, 0.8), (0.2, 0.0), (0.0, 0.8), (0.0, 0.0)]
    >>> sentence = "<think>x</think><answer>Lima is the capital of Peru</answer>"
    >>> [(round(p.format, 3), round(p.correct, 3)) for p in em_format_parts([sentence], golden_answers=[["Lima"]],
    ...                                                                      f1_score=0.3)]
    [(0.2, 0.1)]

    The parts add up to the reward:

    >>> kwargs = dict(golden_answers=[["Lima"]] * 3, answer_score=0.05, f1_score=0.3)
    >>> texts = [sentence, well_formed[1], "I say <answer>Quito</answer>"]
    >>> [round(sum(p), 9) for p in em_format_parts(texts, **kwargs)] == [round(r, 9) for r in em_format_reward(
    ...     texts, **kwargs)]
    True
    """
    if answers is None:
        answers = [extract_answer(c) for c in completions]
    rewards = em_format_reward(
        completions,
        golden_answers=golden_answers,
        answers=answers,
        format_score=format_score,
        retrieval_score=retrieval_score,
        answer_score=answer_score,
        format_requires_search=format_requires_search,
        f1_score=f1_score,
    )
    parts = []
    for completion, answer, golds, reward in zip(completions, answers, golden_answers, rewards, strict=True):
        if exact_match(answer, golds):
            correct = 1.0 - format_score
        elif is_valid_format(completion) and (not format_requires_search or searched(completion)):
            correct = f1_score * f1(answer, golds)
        else:
            correct = 0.0
        parts.append(RewardParts(reward - correct, correct))
    return parts


REWARD_PARTS = {"em": em_parts, "em_format": em_format_parts}
"""Per training reward (`REWARDS`), the same reward split into its format and correctness parts."""
