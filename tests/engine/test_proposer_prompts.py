"""Tests for the optimizer prompts of the reflection, paraphrase and history proposers."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspo_engine.proposers import (
    OPTIMIZER_SYSTEM_PROMPT,
    PROPOSER_KINDS,
    REQUIRED_TAGS,
    RESPONSE_CHAR_LIMIT,
    FailureExample,
    ScoredInstruction,
    build_prompt,
    history_prompt,
    paraphrase_prompt,
    parse_proposal,
    reflection_prompt,
    truncate_middle,
)

PARENT = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. If you are missing knowledge, search by writing <search> your query </search>; the search engine "
    "returns the top passages between <information> and </information>. You may search as many times as you need. "
    "When you are confident, give only the final short answer inside <answer> and </answer>, for example "
    "<answer> Paris </answer>."
)
THINK_AND_ANSWER_ONLY = "Reason inside <think> and </think>, then reply with the answer inside <answer> and </answer>."

FAILURES = (
    FailureExample(
        question="Which river flows through the capital of the country where the Eiffel Tower stands?",
        response=(
            "<think> The Eiffel Tower is in Paris, so the river is probably the Loire. </think>"
            "<answer> the Loire river, which flows through Paris </answer>"
        ),
        golden_answers=("Seine", "the Seine", "River Seine"),
        reward=0.0,
    ),
    FailureExample(
        question="Who directed the film that won Best Picture in 1998?",
        response=(
            "<think> I should search. </think><search> best picture 1998 </search>"
            "<information> Doc 1: Titanic won Best Picture at the 70th Academy Awards. </information>"
            "<think> Titanic was directed by... I am not sure. </think><answer> Steven Spielberg </answer>"
        ),
        golden_answers=("James Cameron",),
        reward=0.0,
    ),
)
HISTORY = (
    ScoredInstruction(
        "Answer with <think> </think>, <search> </search>, <information> </information>, <answer> </answer>. Best one.",
        71.5,
    ),
    ScoredInstruction(
        "Worst: use <think> </think> <search> </search> <information> </information> <answer> </answer>.", 12.0
    ),
    ScoredInstruction(PARENT, 48.25),
)


def _all_prompts(n: int, parent: str = PARENT) -> dict[str, str]:
    return {kind: build_prompt(kind, parent=parent, n=n, failures=FAILURES, history=HISTORY) for kind in PROPOSER_KINDS}


def _keep_rule(prompt: str) -> str:
    return next(line for line in prompt.splitlines() if line.startswith("- Keep every"))


# --- the parent and the numbered tags -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["reflection", "paraphrase"])
def test_the_prompt_shows_the_parent_inside_ins_0(kind: str) -> None:
    prompt = _all_prompts(3)[kind]
    assert f"<ins_0>\n{PARENT}\n</ins_0>" in prompt


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("kind", PROPOSER_KINDS)
def test_the_prompt_asks_for_exactly_n_numbered_tags(kind: str, n: int) -> None:
    prompt = _all_prompts(n)[kind]
    for k in range(1, n + 1):
        assert f"<ins_{k}>" in prompt
        assert f"</ins_{k}>" in prompt
    assert f"<ins_{n + 1}>" not in prompt
    assert f"exactly {n} numbered candidate" in prompt


@pytest.mark.parametrize("kind", PROPOSER_KINDS)
def test_the_prompt_demands_both_forms_of_every_tag_the_parent_uses(kind: str) -> None:
    rule = _keep_rule(_all_prompts(2)[kind])
    for tag in REQUIRED_TAGS:
        assert f"<{tag}> and </{tag}>" in rule


@pytest.mark.parametrize("kind", ["reflection", "paraphrase"])
def test_the_prompt_demands_only_the_tags_the_parent_uses(kind: str) -> None:
    rule = _keep_rule(_all_prompts(2, parent=THINK_AND_ANSWER_ONLY)[kind])
    assert "<think> and </think>" in rule
    assert "<answer> and </answer>" in rule
    assert "<search>" not in rule
    assert "<information>" not in rule


def test_a_parent_without_tags_still_gets_a_generic_rule_to_keep_its_tags() -> None:
    rule = _keep_rule(paraphrase_prompt("Answer the question as briefly as you can.", 2))
    assert "XML-style tag" in rule


@pytest.mark.parametrize("kind", PROPOSER_KINDS)
def test_the_prompt_describes_the_search_agent_protocol(kind: str) -> None:
    prompt = _all_prompts(2)[kind]
    for tag in REQUIRED_TAGS:
        assert f"<{tag}>" in prompt
        assert f"</{tag}>" in prompt


@pytest.mark.parametrize("kind", PROPOSER_KINDS)
def test_the_prompt_asks_for_standalone_concise_general_candidates(kind: str) -> None:
    prompt = _all_prompts(2)[kind].lower()
    assert "standalone" in prompt
    assert "diff" in prompt
    assert "concise" in prompt
    assert "specific question" in prompt


@pytest.mark.parametrize(
    ("kind", "asks_for_analysis"), [("reflection", True), ("history", True), ("paraphrase", False)]
)
def test_only_reflection_and_history_ask_for_an_analysis(kind: str, asks_for_analysis: bool) -> None:
    prompt = _all_prompts(2)[kind]
    assert ("<analysis>" in prompt and "</analysis>" in prompt) is asks_for_analysis


def test_the_system_prompt_casts_the_optimizer_as_a_prompt_engineer_for_search_agents() -> None:
    assert "prompt engineer" in OPTIMIZER_SYSTEM_PROMPT
    assert "search" in OPTIMIZER_SYSTEM_PROMPT


# --- reflection ----------------------------------------------------------------------------------------------------


def test_the_reflection_prompt_shows_every_failure_with_its_question_response_and_gold_answers() -> None:
    prompt = reflection_prompt(PARENT, FAILURES, 2)
    for failure in FAILURES:
        assert failure.question in prompt
        assert failure.response in prompt
        for answer in failure.golden_answers:
            assert answer in prompt
    assert prompt.index(FAILURES[0].question) < prompt.index(FAILURES[1].question)


def test_the_reflection_prompt_puts_the_parent_before_the_failures() -> None:
    prompt = reflection_prompt(PARENT, FAILURES, 2)
    assert prompt.index("</ins_0>") < prompt.index(FAILURES[0].question)


def test_the_reflection_prompt_asks_why_the_instruction_let_the_policy_fail() -> None:
    prompt = reflection_prompt(PARENT, FAILURES, 2)
    assert "what in the instruction allowed that" in prompt


def test_the_reflection_prompt_truncates_a_long_response_keeping_head_and_tail() -> None:
    response = "HEAD-OF-RESPONSE " + "<think> still thinking </think> " * 400 + "<answer> TAIL-ANSWER </answer>"
    failure = FailureExample("Q?", response, ("A",), 0.0)
    prompt = reflection_prompt(PARENT, [failure], 1)
    assert "HEAD-OF-RESPONSE" in prompt
    assert "<answer> TAIL-ANSWER </answer>" in prompt
    assert "characters omitted" in prompt
    assert response not in prompt
    assert prompt.count("still thinking") < 400


def test_the_reflection_prompt_shows_a_short_response_whole() -> None:
    prompt = reflection_prompt(PARENT, FAILURES[:1], 1)
    assert FAILURES[0].response in prompt
    assert "omitted" not in prompt


def test_the_reflection_prompt_marks_a_failure_without_gold_answers() -> None:
    prompt = reflection_prompt(PARENT, [FailureExample("Q?", "<answer> x </answer>", (), 0.0)], 1)
    assert "(none given)" in prompt


# --- truncate_middle -----------------------------------------------------------------------------------------------


def test_truncate_middle_leaves_text_within_the_limit_alone() -> None:
    text = "x" * RESPONSE_CHAR_LIMIT
    assert truncate_middle(text) == text


@settings(max_examples=100, deadline=None)
@given(text=st.text(min_size=0, max_size=5000), limit=st.integers(min_value=2, max_value=2000))
def test_truncate_middle_keeps_an_exact_head_and_tail_of_a_long_text(text: str, limit: int) -> None:
    cut = truncate_middle(text, limit)
    if len(text) <= limit:
        assert cut == text
        return
    marker = f"\n[... {len(text) - limit} characters omitted ...]\n"
    head, tail = limit // 2, limit - limit // 2
    assert cut == text[:head] + marker + text[-tail:]


def test_truncate_middle_refuses_a_limit_below_two() -> None:
    with pytest.raises(ValueError, match="limit"):
        truncate_middle("abc", 1)


# --- paraphrase ----------------------------------------------------------------------------------------------------


def test_the_paraphrase_prompt_asks_to_keep_the_meaning_and_protocol() -> None:
    prompt = paraphrase_prompt(PARENT, 4)
    assert "4 paraphrases" in prompt
    assert "same protocol" in prompt


# --- history -------------------------------------------------------------------------------------------------------


def test_the_history_prompt_lists_instructions_by_ascending_score_with_the_best_last() -> None:
    prompt = history_prompt(HISTORY, 3)
    positions = [prompt.index(f'score="{score}"') for score in ("12.0", "48.2", "71.5")]
    assert positions == sorted(positions)
    assert prompt.index(HISTORY[0].text) > prompt.index(PARENT) > prompt.index(HISTORY[1].text)
    assert "best instruction comes last" in prompt


def test_the_history_prompt_shows_every_instruction_with_its_score() -> None:
    prompt = history_prompt(HISTORY, 2)
    for item in HISTORY:
        assert f'<instruction score="{item.score:.1f}">\n{item.text}\n</instruction>' in prompt


def test_the_history_prompt_asks_what_makes_the_better_ones_better_and_for_higher_scores() -> None:
    prompt = history_prompt(HISTORY, 2)
    assert "higher-scoring ones do that the lower-scoring ones do not" in prompt
    assert "score higher than every instruction above" in prompt


def test_the_history_prompt_demands_the_tags_of_every_listed_instruction() -> None:
    history = [ScoredInstruction(THINK_AND_ANSWER_ONLY, 30.0), ScoredInstruction("Search with <search> </search>.", 5)]
    rule = _keep_rule(history_prompt(history, 1))
    for tag in ("think", "search", "answer"):
        assert f"<{tag}> and </{tag}>" in rule
    assert "<information>" not in rule


def test_build_prompt_for_history_also_demands_the_parents_tags() -> None:
    history = [ScoredInstruction(THINK_AND_ANSWER_ONLY, 30.0)]
    rule = _keep_rule(build_prompt("history", parent=PARENT, n=1, history=history))
    for tag in REQUIRED_TAGS:
        assert f"<{tag}> and </{tag}>" in rule


# --- build_prompt --------------------------------------------------------------------------------------------------


def test_build_prompt_dispatches_to_each_builder() -> None:
    assert build_prompt("reflection", parent=PARENT, n=2, failures=FAILURES) == reflection_prompt(PARENT, FAILURES, 2)
    assert build_prompt("paraphrase", parent=PARENT, n=2) == paraphrase_prompt(PARENT, 2)
    assert build_prompt("history", parent=PARENT, n=2, history=HISTORY) == history_prompt(HISTORY, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "mutation", "n": 2}, "unknown proposer kind"),
        ({"kind": "paraphrase", "n": 0}, "n must be at least 1"),
        ({"kind": "reflection", "n": 2, "failures": ()}, "at least one failure"),
        ({"kind": "history", "n": 2, "history": ()}, "at least one scored instruction"),
        ({"kind": "reflection", "n": 0, "failures": FAILURES}, "n must be at least 1"),
        ({"kind": "history", "n": -1, "history": HISTORY}, "n must be at least 1"),
        ({"kind": "paraphrase", "n": 2, "parent": "   "}, "parent instruction is empty"),
    ],
)
def test_build_prompt_refuses_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"parent": PARENT, **kwargs}
    with pytest.raises(ValueError, match=message):
        build_prompt(**arguments)  # type: ignore[arg-type]


# --- prompt and parser agree ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PROPOSER_KINDS)
def test_a_reply_that_fills_in_the_requested_format_parses_cleanly(kind: str) -> None:
    prompt = _all_prompts(3)[kind]
    template = prompt[prompt.index("Reply in exactly this format") :].split("\n", 1)[1]
    reply = template.replace("(your analysis)", "The agent never verified its answers.")
    for k in range(1, 4):
        reply = reply.replace(f"(candidate {k}: the complete instruction)", f"{PARENT} Variant {k}: verify first.")
    proposal = parse_proposal(reply, parent=PARENT, n=3)
    assert proposal.candidates == tuple(f"{PARENT} Variant {k}: verify first." for k in range(1, 4))
    assert proposal.critique == ("The agent never verified its answers." if "<analysis>" in template else "")


def test_no_prompt_contains_a_numbered_tag_beyond_those_it_asks_for() -> None:
    for prompt in _all_prompts(2).values():
        numbers = {int(m) for m in re.findall(r"<ins_(\d+)>", prompt)}
        assert numbers <= {0, 1, 2}


@pytest.mark.parametrize("kind", ["reflection", "paraphrase", "history"])
def test_the_prompt_says_truthfully_where_the_agent_reads_its_instruction(kind: str) -> None:
    parent = "Think in <think> </think>, search with <search> </search>, answer in <answer> </answer>."
    shown = {
        "history": [ScoredInstruction(parent, 40.0)],
        "failures": [FailureExample("Capital of Peru?", "It is Quito.", ("Lima",), 0.0)],
    }
    user = build_prompt(kind, parent=parent, n=2, **shown, placement="user")  # type: ignore[arg-type]
    system = build_prompt(kind, parent=parent, n=2, **shown, placement="system")  # type: ignore[arg-type]
    assert "start of its user message, right before the question" in user and "system message" not in user
    assert "are the system message" in system and "right before the question" not in system
