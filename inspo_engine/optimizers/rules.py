"""RuleBasedClient: an offline, deterministic stand-in for the optimizer LLM; it is not a language model.

It reads the same prompts an LLM gets, diagnoses the failure trajectories shown (no search, no answer tags,
a wrong answer after searching, …) and answers in the same `<analysis>` / `<ins_k>` format, each candidate being
the parent plus one piece of guidance aimed at a diagnosed weakness. It exists so a machine without an API key,
and too small for a useful local LLM, still runs the whole generate → verify → select loop for real.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from inspo_engine.env.rewards import answers_with_query
from inspo_engine.optimizers.base import Completion

_PARENT = re.compile(r"<ins_0>\s*(.*?)\s*</ins_0>", re.S)
_HISTORY = re.compile(r'<instruction score="([0-9.]+)">\s*(.*?)\s*</instruction>', re.S)
_ASKED = re.compile(r"<ins_(\d+)>")
_RESPONSE = re.compile(r"Agent response:\s*<<<\s*(.*?)\s*>>>", re.S)


@dataclass(frozen=True)
class Guidance:
    """A sentence of advice and the failure symptom it answers."""

    symptom: str
    sentence: str


WORKED_EXAMPLE = (
    "Search first, naming what the question asks about: for 'What is the capital of Peru?' write <search> capital "
    "of Peru </search>. Reply in this shape: <think> what I must find </think>, then your search, and once the "
    "passages arrive in <information> and </information>: <think> what they say </think> <answer> the short answer "
    "</answer>"
)
"""The whole protocol as a template: what a small policy that never writes the tags needs most. Its answer names no
entity, since a small policy copies a concrete example's answer into every reply; its search is shown as a question
and the query it deserves rather than as a slot, since a slot's placeholder is copied into every search (and
retrieves nothing useful)."""

SHORT_EXAMPLE = "Reply in this shape: <think> what the question asks </think> <answer> the short answer </answer>"
"""The shortest well-formed reply as a template: reasoning, then the answer in its tags."""

GUIDANCE = (
    Guidance("no search", "Before answering, always search at least once with <search> and </search>."),
    Guidance("no answer tags", "Always end with the final answer inside <answer> and </answer>; never omit it."),
    Guidance("no answer tags", WORKED_EXAMPLE),
    Guidance("no answer tags", SHORT_EXAMPLE),
    Guidance("long answer", "Inside <answer> and </answer> write only the name or number asked for, nothing else."),
    Guidance("wrong after search", "Read the passages in <information> and </information> and copy the exact name."),
    Guidance(
        "answer repeats query",
        "Never answer with your own search query: answer with the name the passages give for what you searched.",
    ),
    Guidance("no reasoning", "Begin every turn with a short plan inside <think> and </think>."),
    Guidance("many searches", "Use short keyword queries of two to five words; do not repeat a search."),
    Guidance("two hops", "For a question about one entity via another, search for the first entity, then the second."),
)


def diagnose(response: str) -> list[str]:
    """Symptoms of one failed response, most telling first.

    >>> diagnose("I think it is Lima.")
    ['no search', 'no answer tags', 'no reasoning']
    >>> diagnose("<think>x</think><search>a</search><information>d</information><answer>Lima Peru capital</answer>")
    ['long answer', 'wrong after search']
    >>> diagnose("<think>x</think><search> Benin </search><information>d</information><answer>Benin</answer>")
    ['wrong after search', 'answer repeats query']
    """
    symptoms = []
    searched = "<search>" in response
    answer = re.search(r"<answer>(.*?)</answer>", response, re.S)
    if not searched:
        symptoms.append("no search")
    if answer is None:
        symptoms.append("no answer tags")
    elif len(answer.group(1).split()) > 2:
        symptoms.append("long answer")
    if searched and answer is not None:
        symptoms.append("wrong after search")
        if answers_with_query(response):
            symptoms.append("answer repeats query")
    if "<think>" not in response:
        symptoms.append("no reasoning")
    if response.count("<search>") > 3:
        symptoms.append("many searches")
    return symptoms


class RuleBasedClient:
    """Proposes guided edits of the parent instruction; stateless, so the same seed and prompt give the same
    answer (a resumed run replays exactly)."""

    def __init__(self, *, seed: int = 0) -> None:
        self.model = "rules (offline heuristic, not an LLM)"
        self.seed = seed

    def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        rng = random.Random(f"{self.seed}:{digest}")
        parent = _parent_of(prompt)
        asked = max((int(k) for k in _ASKED.findall(prompt)), default=1)
        counts = _symptom_counts(prompt)
        ranked = _rank_guidance(parent, counts, rng)
        candidates = [f"{parent} {g.sentence}" for g in ranked[:asked]]
        seen = ", ".join(f"{name} ({count})" for name, count in counts.items() if count) or "no clear pattern"
        analysis = f"Symptoms in the failures shown: {seen}. Each candidate adds guidance against one of them."
        body = "\n".join(f"<ins_{i}>\n{text}\n</ins_{i}>" for i, text in enumerate(candidates, start=1))
        text = f"<analysis>\n{analysis}\n</analysis>\n{body}"
        return Completion(
            text=text, model=self.model, input_tokens=len(prompt.split()), output_tokens=len(text.split())
        )


def _parent_of(prompt: str) -> str:
    """The instruction to edit: the <ins_0> block, or the best-scored one of a history prompt."""
    shown: list[str] = [block for block in _PARENT.findall(prompt) if len(block) > 20]
    if shown:
        return max(shown, key=len)
    history: list[tuple[float, str]] = [(float(score), text) for score, text in _HISTORY.findall(prompt)]
    if history:
        return max(history)[1]
    raise ValueError("the prompt shows no instruction to edit")


def _symptom_counts(prompt: str) -> dict[str, int]:
    counts = {g.symptom: 0 for g in GUIDANCE}
    for response in _RESPONSE.findall(prompt):
        for symptom in diagnose(response):
            counts[symptom] += 1
    return counts


def _rank_guidance(parent: str, counts: dict[str, int], rng: random.Random) -> list[Guidance]:
    """Unused guidance, the most frequent symptom first; ties and unseen symptoms in seeded random order."""
    fresh = [g for g in GUIDANCE if g.sentence not in parent]
    order = {g.symptom: rng.random() for g in fresh}
    return sorted(fresh, key=lambda g: (-counts.get(g.symptom, 0), order[g.symptom]))
