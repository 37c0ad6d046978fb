"""Turns an optimizer's raw reply into validated candidate instructions; knows nothing of prompts or models."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

REQUIRED_TAGS: tuple[str, ...] = ("think", "search", "answer", "information")
TOO_LONG_FACTOR = 4
TOO_LONG_MIN_CHARS = 4000
_MAX_PEELS = 16  # layers of wrapping peeled off a candidate; bounds the work on pathological replies

# `<ins_1>`, `<ins_1 >`, `<INS_1>`, `< ins_1 >`, `<ins-1>`, `</ ins_1>`, `<\/ins_1>`; a bare `<ins>` is numberless.
_INS_TAG = re.compile(r"<\s*(\\?/)?\s*ins(?:[\s_-]*(\d+))?\s*>", re.IGNORECASE)
_ANALYSIS_OPEN = re.compile(r"<\s*analysis\s*>", re.IGNORECASE)
_ANALYSIS_CLOSE = re.compile(r"<\s*\\?/\s*analysis\s*>", re.IGNORECASE)
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[\w+.-]*[ \t]*$", re.MULTILINE)
_LEADING_FENCE = re.compile(r"\A(?:```|~~~)[\w+.-]*[ \t]*(?:\n|\Z)")
_TRAILING_FENCE = re.compile(r"(?:\A|\n)[ \t]*(?:```|~~~)[ \t]*\Z")
_RULE_LINE_START = re.compile(r"\A[ \t]*[*_=-]{2,}[ \t]*(?:\n|\Z)")
_RULE_LINE_END = re.compile(r"(?:\A|\n)[ \t]*[*_=-]{2,}[ \t]*\Z")
_ORPHAN_BOLD_START = re.compile(r"\A(?:\*\*|__)(?=\s|\Z)")
_ORPHAN_BOLD_END = re.compile(r"(?<=\s)(?:\*\*|__)\Z")
_DANGLING_LIST_MARKER = re.compile(r"(?:\A|\n)[ \t]*(?:\d+[.)]|[-*])[ \t]*\Z")
_LABEL = re.compile(
    r"\A(?:\*\*|__)?[ \t]*"
    r"(?:(?:new|improved|revised|rewritten|paraphrased|candidate|final)[ \t]+)?(?:system[ \t]+)?"
    r"(?:instruction|prompt|candidate)(?:[ \t]*#?[ \t]*\d+)?[ \t]*(?:\*\*|__)?[ \t]*[:：][ \t]*(?:\*\*|__)?",
    re.IGNORECASE,
)
_QUOTE_PAIRS: tuple[tuple[str, str], ...] = (
    ('"""', '"""'),
    ("```", "```"),
    ('"', '"'),
    ("'", "'"),
    ("`", "`"),
    ("\u201c", "\u201d"),
    ("\u2018", "\u2019"),
    ("\u00ab", "\u00bb"),
)


@dataclass(frozen=True)
class RejectedCandidate:
    """A candidate the optimizer proposed that failed validation, with a human-readable reason."""

    text: str
    reason: str


@dataclass(frozen=True)
class ParsedProposal:
    """The optimizer's reply, parsed: its critique, the valid candidates (at most n, in order) and the rejects."""

    critique: str
    candidates: tuple[str, ...]
    rejected: tuple[RejectedCandidate, ...]


@dataclass(frozen=True)
class _Block:
    """One `<ins_k>` block found in the reply; ``end`` is past its closing tag when it has one."""

    number: str | None
    start: int
    body_start: int
    body_end: int
    end: int
    closed: bool

    @property
    def is_echo(self) -> bool:
        return self.number is not None and set(self.number) == {"0"}


def required_tags(instruction: str) -> tuple[str, ...]:
    """Which of REQUIRED_TAGS the instruction uses (opening or closing form present).

    Candidates must keep both forms of each.
    """
    return tuple(tag for tag in REQUIRED_TAGS if f"<{tag}>" in instruction or f"</{tag}>" in instruction)


def missing_tags(candidate: str, tags: Sequence[str]) -> list[str]:
    """The tag forms (e.g. '<search>', '</search>') absent from the candidate."""
    forms = [form for tag in tags for form in (f"<{tag}>", f"</{tag}>")]
    return [form for form in forms if form not in candidate]


def parse_proposal(text: str, *, parent: str, n: int) -> ParsedProposal:
    """Extract and validate up to ``n`` candidates from an optimizer reply; never raises on the reply's content.

    Rejection reasons, checked in this order: "empty", "too long", "identical to the parent",
    "missing <forms>", "duplicate of candidate K" (K counts the reply's candidate blocks from 1, in textual
    order), and "more than n candidates" (with n spelled out) for valid candidates beyond the first ``n``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    analysis_body, skip = _find_analysis(text)
    blocks = [block for block in _scan_blocks(text, skip) if not block.is_echo]
    raw = [_candidate_text(text, block) for block in blocks]
    candidates, rejected = _validate(raw, parent=parent, n=n)
    if analysis_body is not None:
        critique = _clean_prose(analysis_body, parent)
    else:
        critique = _clean_prose(text[: blocks[0].start] if blocks else text, parent)
    return ParsedProposal(critique=critique, candidates=tuple(candidates), rejected=tuple(rejected))


def _scan_blocks(text: str, skip: tuple[int, int] | None = None) -> list[_Block]:
    """Every `<ins_k>` block in textual order. A block ends at any closing ins tag, the next opening tag, or the end."""
    blocks: list[_Block] = []
    opening: re.Match[str] | None = None
    for tag in _INS_TAG.finditer(text):
        if skip is not None and skip[0] <= tag.start() < skip[1]:
            continue
        is_closing = tag.group(1) is not None
        if opening is not None:
            end = tag.end() if is_closing else tag.start()
            blocks.append(_Block(opening.group(2), opening.start(), opening.end(), tag.start(), end, is_closing))
            opening = None
        if not is_closing:
            opening = tag
    if opening is not None:
        blocks.append(_Block(opening.group(2), opening.start(), opening.end(), len(text), len(text), False))
    return blocks


def _first_candidate_opening(text: str, start: int) -> int | None:
    """Where the first non-echo opening ins tag at or after ``start`` begins, if any."""
    for tag in _INS_TAG.finditer(text, start):
        number = tag.group(2)
        if tag.group(1) is None and (number is None or set(number) != {"0"}):
            return tag.start()
    return None


def _find_analysis(text: str) -> tuple[str | None, tuple[int, int] | None]:
    """The `<analysis>` body (or None) and the span to hide from candidate scanning (or None).

    An unclosed analysis runs until the first candidate tag. A closed one hides any ins tags it mentions, unless the
    model put its candidates inside it (no candidate tag follows the closing tag); then it ends at the first candidate.
    """
    opening = _ANALYSIS_OPEN.search(text)
    if opening is None:
        return None, None
    closing = _ANALYSIS_CLOSE.search(text, opening.end())
    first_inside = _first_candidate_opening(text, opening.end())
    if closing is None:
        return text[opening.end() : first_inside if first_inside is not None else len(text)], None
    candidates_follow = _first_candidate_opening(text, closing.end()) is not None
    if first_inside is not None and first_inside < closing.start() and not candidates_follow:
        return text[opening.end() : first_inside], None
    return text[opening.end() : closing.start()], (opening.start(), closing.end())


def _candidate_text(text: str, block: _Block) -> str:
    body = text[block.body_start : block.body_end]
    if not block.closed:
        body = _cut_at_fence(body)
    return _clean_candidate(body)


def _cut_at_fence(body: str) -> str:
    """An unclosed candidate ends at the fence that closes its own code block, or else at the first fence line."""
    fences = list(_FENCE_LINE.finditer(body))
    if not fences:
        return body
    if body[: fences[0].start()].strip():
        return body[: fences[0].start()]
    return body[: fences[1].end()] if len(fences) > 1 else body


def _clean_candidate(raw: str) -> str:
    """Peel whitespace, code fences, stray bold/rule markup, "Instruction:" labels and wrapping quotes, repeatedly."""
    text = raw
    for _ in range(_MAX_PEELS):
        before = text
        text = text.strip()
        text = _TRAILING_FENCE.sub("", _LEADING_FENCE.sub("", text, count=1), count=1)
        text = _RULE_LINE_END.sub("", _RULE_LINE_START.sub("", text, count=1), count=1)
        text = _ORPHAN_BOLD_END.sub("", _ORPHAN_BOLD_START.sub("", text, count=1), count=1)
        text = _strip_wrapping_bold(text)
        text = _LABEL.sub("", text, count=1)
        text = _strip_quotes(text)
        if text == before:
            break
    return text


def _strip_wrapping_bold(text: str) -> str:
    """Drop a bold/underline mark pair wrapping the whole text, or a lone unmatched mark at either end."""
    for mark in ("**", "__"):
        inner = text[len(mark) : -len(mark)]
        if len(text) > 2 * len(mark) and text.startswith(mark) and text.endswith(mark) and mark not in inner:
            return inner
        if text.count(mark) % 2 == 1:
            if text.startswith(mark):
                return text[len(mark) :]
            if text.endswith(mark):
                return text[: -len(mark)]
    return text


def _strip_quotes(text: str) -> str:
    for left, right in _QUOTE_PAIRS:
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)]
    return text


def _clean_prose(prose: str, parent: str) -> str:
    """Prose minus echoed `<ins_0>` blocks (an unclosed echo loses the parent text), stray tags and fence lines."""
    echoed_parent = _loose_pattern(parent)
    kept: list[str] = []
    position = 0
    for block in _scan_blocks(prose):
        end = block.end if block.closed else None
        if end is None and block.is_echo and echoed_parent is not None:
            echo = echoed_parent.match(prose, block.body_start)
            end = echo.end() if echo is not None else None
        if end is not None:
            kept.append(prose[position : block.start])
            position = end
    kept.append(prose[position:])
    text = _INS_TAG.sub("", "".join(kept))
    text = _ANALYSIS_CLOSE.sub("", _ANALYSIS_OPEN.sub("", text))
    return _DANGLING_LIST_MARKER.sub("", _FENCE_LINE.sub("", text).strip()).strip()


def _loose_pattern(text: str) -> re.Pattern[str] | None:
    """A pattern matching ``text`` with any whitespace and case, or None for blank text."""
    words = text.split()
    if not words:
        return None
    return re.compile(r"\s*" + r"\s+".join(re.escape(word) for word in words), re.IGNORECASE)


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _validate(raw: Sequence[str], *, parent: str, n: int) -> tuple[list[str], list[RejectedCandidate]]:
    tags = required_tags(parent)
    parent_key = _normalise(parent)
    seen: dict[str, int] = {}
    accepted: list[str] = []
    rejected: list[RejectedCandidate] = []
    for ordinal, candidate in enumerate(raw, start=1):
        key = _normalise(candidate)
        reason = _rejection_reason(candidate, key, parent=parent, parent_key=parent_key, tags=tags, seen=seen)
        if reason is None:
            seen[key] = ordinal
            if len(accepted) >= n:
                reason = f"more than {n} candidates"
            else:
                accepted.append(candidate)
        if reason is not None:
            rejected.append(RejectedCandidate(text=candidate, reason=reason))
    return accepted, rejected


def _rejection_reason(
    candidate: str, key: str, *, parent: str, parent_key: str, tags: Sequence[str], seen: dict[str, int]
) -> str | None:
    if not key:
        return "empty"
    if len(candidate) > TOO_LONG_FACTOR * len(parent) and len(candidate) > TOO_LONG_MIN_CHARS:
        return "too long"
    if key == parent_key:
        return "identical to the parent"
    missing = missing_tags(candidate, tags)
    if missing:
        return "missing " + ", ".join(missing)
    if key in seen:
        return f"duplicate of candidate {seen[key]}"
    return None
