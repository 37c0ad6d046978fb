"""Reward functions: pure `(completions, **kwargs) -> list[float]` over final answers; they know no model or tokens."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

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


def is_valid_format(response: str) -> bool:
    """Every <think>/<search>/<answer> opened is closed in order, and exactly one answer ends the response.

    >>> is_valid_format("<think>x</think><search>q</search><information>d</information><answer>y</answer>")
    True
    >>> is_valid_format("<think>x</think> y")
    False
    """
    tags = re.findall(r"</?(think|search|answer|information)>", response)
    opened = re.findall(r"<(/?)(think|search|answer|information)>", response)
    stack: list[str] = []
    for closing, tag in opened:
        if not closing:
            if stack:
                return False
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    answers = len(_ANSWER.findall(response))
    return bool(tags) and not stack and answers == 1 and response.rstrip().endswith("</answer>")


def em_reward(completions: Sequence[str], *, golden_answers: Sequence[Sequence[str]], **_: object) -> list[float]:
    """The training reward: exact match of each completion's final answer; a missing answer scores 0.

    >>> em_reward(["<answer> Paris </answer>", "Paris"], golden_answers=[["paris"], ["paris"]])
    [1.0, 0.0]
    """
    return [exact_match(extract_answer(c), golds) for c, golds in zip(completions, golden_answers, strict=True)]


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
