"""The Search-R1 text protocol: parsing a model turn into an action and rendering retrieved passages; no model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

STOP_STRINGS = ("</search>", "</answer>")
Placement = Literal["user", "system"]
"""Where a rollout's chat carries the instruction: before the question in the user turn, or as the system message."""
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.S)


@dataclass(frozen=True)
class Passage:
    """One retrieved passage."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Action:
    """What a model turn asked for: a search, a final answer, or nothing usable."""

    kind: Literal["search", "answer", "invalid"]
    content: str


class Retriever(Protocol):
    """Top-k passages per query. Implementations: dense (faiss), sparse (BM25), remote (/retrieve)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


def chat_messages(instruction: str, question: str, placement: Placement = "user") -> list[dict[str, str]]:
    """The chat a rollout starts from. `user` is the paper's App. F (Search-R1's template): one user turn holding the
    instruction, then `Question: …`. `system` puts the instruction in the system message and the question alone in
    the user turn.

    >>> chat_messages("Answer it.", "Capital of Peru?")
    [{'role': 'user', 'content': 'Answer it.\\nQuestion: Capital of Peru?\\n'}]
    >>> [m["role"] for m in chat_messages("Answer it.", "Capital of Peru?", "system")]
    ['system', 'user']
    """
    if placement == "system":
        return [{"role": "system", "content": instruction}, {"role": "user", "content": question}]
    return [{"role": "user", "content": f"{instruction}\nQuestion: {question}\n"}]


def rollout_over(action: Action, turns_done: int, max_turns: int) -> bool:
    """Whether a rollout ends after its `turns_done`-th turn, counted as Search-R1 counts them: `max_turns` turns
    may search, then one last turn may only answer. An answer ends a rollout at any turn.

    >>> rollout_over(Action("search", "Peru"), 2, max_turns=2)
    False
    >>> rollout_over(Action("search", "Peru"), 3, max_turns=2)
    True
    >>> rollout_over(Action("answer", "Lima"), 1, max_turns=2)
    True
    """
    return action.kind == "answer" or turns_done > max_turns


def most_turns(max_turns: int) -> int:
    """The most model turns a rollout can take: the searching turns and the final one.

    >>> most_turns(4)
    5
    """
    return max_turns + 1


def parse_action(turn: str) -> Action:
    """The first complete <search>…</search> or <answer>…</answer> in a model turn.

    >>> parse_action("<think>need facts</think><search> capital of Peru </search>")
    Action(kind='search', content='capital of Peru')
    >>> parse_action("<answer>Lima</answer>")
    Action(kind='answer', content='Lima')
    >>> parse_action("I think it is Lima.").kind
    'invalid'
    """
    match = _ACTION.search(turn)
    if match is None:
        return Action("invalid", "")
    return Action(match.group(1), match.group(2).strip())  # type: ignore[arg-type]


def format_passages(passages: Sequence[Passage]) -> str:
    """Passages as Search-R1 shows them: `Doc i(Title: …) text`, one per line.

    >>> format_passages([Passage("1", "Peru", "Lima is the capital.")])
    'Doc 1(Title: Peru) Lima is the capital.'
    """
    return "\n".join(f"Doc {i}(Title: {p.title}) {p.text}" for i, p in enumerate(passages, start=1))


def observation(passages: Sequence[Passage]) -> str:
    """The text appended after a search turn; its tokens are masked out of the policy loss.

    >>> observation([Passage("1", "Peru", "Lima.")])
    '\\n\\n<information>Doc 1(Title: Peru) Lima.</information>\\n\\n'
    """
    return f"\n\n<information>{format_passages(passages)}</information>\n\n"


INVALID_ACTION_NOTE = (
    "\n[That turn had no action. To search, put a query inside the search tags; to finish, put the final answer "
    "inside the answer tags.]\n"
)
"""Appended (masked like an observation) when a turn has neither a search nor an answer. It names the tags
without writing them, so nothing that parses a whole response can mistake the note for an action or an answer."""
