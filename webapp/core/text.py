"""Text helpers: checks on text PostgreSQL can store (its text and jsonb types refuse NUL characters), and what sets
one instruction's text apart from another's."""

from __future__ import annotations

from typing import Any


def has_nul(value: Any) -> bool:
    """True when a string anywhere in `value` (keys included) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(v) for v in value)
    return False


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value`, without recursion.

    >>> json_depth({"a": [1, {"b": []}]}), json_depth("text")
    (4, 0)
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def words_that_differ(text: str, reference: str | None, *, words: int = 12) -> str:
    """The first `words` words of `text` from where it stops repeating `reference`, with "…" for the shared opening
    left out and for a cut end; the opening words when there is no reference, and "(same text)" when nothing
    differs. Instructions of a population share long openings; this shows each by what sets it apart.

    >>> words_that_differ("Search first. Then answer with the exact name.", "Search first. Then answer briefly.")
    '… answer with the exact name.'
    >>> words_that_differ("a b c", None, words=2), words_that_differ("a b", "a  b")
    ('a b …', '(same text)')
    """
    mine, theirs = text.split(), (reference or "").split()
    shared = 0
    while shared < min(len(mine), len(theirs)) and mine[shared] == theirs[shared]:
        shared += 1
    if shared == len(mine) and len(mine) == len(theirs):
        return "(same text)"
    start = max(0, shared - 1) if shared else 0  # keep one shared word as context
    shown = mine[start : start + words]
    return " ".join(["…"] * (start > 0) + shown + ["…"] * (start + words < len(mine)))
