"""Builds the optimizer prompts for the three proposer variants; knows nothing of calling models or parsing replies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from inspo_engine.proposers.parsing import REQUIRED_TAGS, required_tags

ProposerKind = Literal["reflection", "paraphrase", "history"]
PROPOSER_KINDS: tuple[ProposerKind, ...] = get_args(ProposerKind)
RESPONSE_CHAR_LIMIT = 1500

OPTIMIZER_SYSTEM_PROMPT = (
    "You are an expert prompt engineer. You design and improve the instructions that steer LLM search "
    "agents, which reason step by step, query a search engine and then answer. You diagnose precisely, write "
    "instructions that are clear and compact, and always reply in exactly the format you are asked for."
)

_PLACEMENTS = {
    "user": "The instructions you work on are given to a language-model agent at the start of its user message, "
    "right before the question (written as 'Question: ...').",
    "system": "The instructions you work on are the system message of a language-model agent; the question arrives "
    "alone in the user message.",
}


def agent_context(placement: str = "user") -> str:
    """What the optimizer is told about the agent, including truthfully where its instruction sits in the chat."""
    return f"{_PLACEMENTS[placement]} {_AGENT_CONTEXT}"


_AGENT_CONTEXT = (
    "The agent answers questions with the help of a search engine. It reasons inside <think> and </think>, sends a "
    "query by writing <search> query </search>, reads the passages the engine returns between <information> and "
    "</information>, and gives its final answer inside <answer> and </answer>. The agent is trained with "
    "reinforcement learning while it follows these "
    "instructions, so the wording of an instruction directly shapes how the agent searches, reasons and answers."
)


@dataclass(frozen=True)
class FailureExample:
    """One question the policy got wrong under the parent instruction: its transcript, the gold answers, its reward."""

    question: str
    response: str
    golden_answers: tuple[str, ...]
    reward: float


@dataclass(frozen=True)
class ScoredInstruction:
    """An instruction that has been tried, with its score (0..100)."""

    text: str
    score: float


def truncate_middle(text: str, limit: int = RESPONSE_CHAR_LIMIT) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a note of how much was cut."""
    if limit < 2:
        raise ValueError(f"limit must be at least 2, got {limit}")
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - limit
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def reflection_prompt(parent: str, failures: Sequence[FailureExample], n: int, *, placement: str = "user") -> str:
    """INSPO's reflection proposer: diagnose why the parent let the policy fail, then propose ``n`` fixes."""
    _check(n, parent)
    if not failures:
        raise ValueError("the reflection proposer needs at least one failure example")
    shown = "\n\n".join(_format_failure(index, failure) for index, failure in enumerate(failures, start=1))
    task = (
        "Your task:\n"
        "1. Diagnose the failures. For each one, pin down where the agent went wrong - for instance it answered "
        "without searching, wrote vague or repetitive queries, overlooked or misread the retrieved passages, gave "
        "up too early, or put a long or malformed answer between the answer tags - and explain what in the "
        "instruction allowed that, or what the instruction should have said but did not. Finish with the "
        "instruction's main weaknesses. Write all of this between <analysis> and </analysis>.\n"
        f"2. Write {_count(n, 'improved instruction')} that fix those weaknesses while keeping what already works."
    )
    return _assemble(
        placement,
        "Below is the current instruction, between <ins_0> and </ins_0>. After it are the questions the agent got "
        f"wrong while following it ({len(failures)} in all), each with the agent's full response (long responses "
        "are cut in the middle) and the correct answer(s).",
        f"<ins_0>\n{parent}\n</ins_0>",
        shown,
        task,
        _rules(required_tags(parent), n),
        _reply_format(n, with_analysis=True),
    )


def paraphrase_prompt(parent: str, n: int, *, placement: str = "user") -> str:
    """APE-style proposer: ``n`` rewordings of the parent that keep its meaning and protocol."""
    _check(n, parent)
    task = (
        f"Your task: write {_count(n, 'paraphrase')} of this instruction that an agent would follow more reliably. "
        "Each one must mean the same thing and ask for the same protocol, but you may reword, reorder, clarify, "
        "tighten or remove redundancy. Do not invent new strategies and do not drop any step."
    )
    return _assemble(
        placement,
        "Below is an instruction, between <ins_0> and </ins_0>.",
        f"<ins_0>\n{parent}\n</ins_0>",
        task,
        _rules(required_tags(parent), n),
        _reply_format(n, with_analysis=False),
    )


def history_prompt(history: Sequence[ScoredInstruction], n: int) -> str:
    """OPRO-style proposer: learn from scored instructions (best last) and propose ``n`` that should score higher."""
    return _history_prompt(history, n, extra_tags=())


def build_prompt(
    kind: ProposerKind,
    *,
    parent: str,
    n: int,
    failures: Sequence[FailureExample] = (),
    history: Sequence[ScoredInstruction] = (),
    placement: str = "user",
) -> str:
    """The prompt for ``kind``. For "history", ``parent`` only adds its tags to the ones candidates must keep.
    ``placement`` is where the agent's chat carries the instruction (the run's `env.instruction_placement`)."""
    if kind == "reflection":
        return reflection_prompt(parent, failures, n, placement=placement)
    if kind == "paraphrase":
        return paraphrase_prompt(parent, n, placement=placement)
    if kind == "history":
        return _history_prompt(history, n, extra_tags=required_tags(parent), placement=placement)
    raise ValueError(f"unknown proposer kind {kind!r}; expected one of {', '.join(PROPOSER_KINDS)}")


def _history_prompt(
    history: Sequence[ScoredInstruction], n: int, *, extra_tags: Iterable[str], placement: str = "user"
) -> str:
    _check(n)
    if not history:
        raise ValueError("the history proposer needs at least one scored instruction")
    ranked = sorted(history, key=lambda item: item.score)
    shown = "\n\n".join(
        f'<instruction score="{_format_score(item.score)}">\n{item.text}\n</instruction>' for item in ranked
    )
    used = set(extra_tags).union(*(required_tags(item.text) for item in ranked))
    task = (
        "Your task:\n"
        "1. Compare the instructions. Work out what the higher-scoring ones do that the lower-scoring ones do not - "
        "in content, emphasis, structure and length - and what seems to hurt. Write this between <analysis> and "
        "</analysis>.\n"
        f"2. Write {_count(n, 'new instruction')} that you expect to score higher than every instruction above. "
        "Build on what works; do not just copy an instruction from the list."
    )
    return _assemble(
        placement,
        "Below are instructions that have already been tried, each with its score: the percentage (0-100) of "
        "questions the agent answered correctly while following it. They are sorted from the lowest score to the "
        "highest, so the best instruction comes last.",
        shown,
        task,
        _rules(tuple(tag for tag in REQUIRED_TAGS if tag in used), n, source="the instructions above"),
        _reply_format(n, with_analysis=True),
    )


def _check(n: int, parent: str | None = None) -> None:
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if parent is not None and not parent.strip():
        raise ValueError("the parent instruction is empty")


def _assemble(placement: str, *sections: str) -> str:
    return "\n\n".join((agent_context(placement), *sections)) + "\n"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _format_score(score: float) -> str:
    return f"{score:.1f}"


def _format_failure(index: int, failure: FailureExample) -> str:
    answers = " | ".join(failure.golden_answers) if failure.golden_answers else "(none given)"
    return (
        f"## Failure {index}\n"
        f"Question: {failure.question.strip()}\n"
        f"Correct answer(s): {answers}\n"
        f"Reward: {failure.reward:.2f}\n"
        f"Agent response:\n<<<\n{truncate_middle(failure.response.strip())}\n>>>"
    )


def _rules(tags: Sequence[str], n: int, *, source: str = "the original") -> str:
    """The constraints every candidate must meet; ``source`` names what the candidates derive from."""
    if tags:
        forms = ", ".join(f"<{tag}> and </{tag}>" for tag in tags)
        keep = (
            f"- Keep every tag used by {source}, in both its opening and closing form: {forms}. A candidate that "
            "leaves out any of these is thrown away without being tried."
        )
    else:
        keep = f"- Keep every XML-style tag used by {source}, in both its opening and closing form."
    others = "one another and from " if n > 1 else ""
    return "\n".join(
        (
            "Rules for every candidate:",
            "- It is a complete, standalone instruction that can be used as it is - never a list of edits, a diff "
            f"or a comment about {source}.",
            keep,
            f"- Stay concise: about as long as {source}, and never more than roughly twice as long.",
            "- Keep it general: do not write any specific question, or the answer to one, into it (any examples "
            f"here are evidence, not the task). A generic format example such as the one in {source} is fine.",
            "- Never use the numbered <ins_...> tags inside a candidate.",
            f"- Make {'the candidates' if n > 1 else 'the candidate'} clearly different from {others}{source}.",
        )
    )


def _reply_format(n: int, *, with_analysis: bool) -> str:
    count = _count(n, "numbered candidate")
    lines = [f"Reply in exactly this format, with exactly {count} and nothing after the last one:"]
    if with_analysis:
        lines += ["<analysis>", "(your analysis)", "</analysis>"]
    for k in range(1, n + 1):
        lines += [f"<ins_{k}>", f"(candidate {k}: the complete instruction)", f"</ins_{k}>"]
    return "\n".join(lines)
