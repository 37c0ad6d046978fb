"""The offline rule-based optimizer answers real prompts in the format the parser expects."""

import pytest

from inspo_engine.config import SEED_INSTRUCTION
from inspo_engine.optimizers import RuleBasedClient
from inspo_engine.optimizers.rules import GUIDANCE, diagnose
from inspo_engine.proposers import FailureExample, ScoredInstruction, build_prompt, parse_proposal

NO_SEARCH = FailureExample("What is the capital of Peru?", "<think>easy</think><answer>Cusco</answer>", ("Lima",), 0.0)
WRONG = FailureExample(
    "What is the capital of Peru?",
    "<think>look</think><search>Peru</search><information>Doc 1</information><answer>Cusco</answer>",
    ("Lima",),
    0.0,
)


@pytest.mark.parametrize("kind", ["reflection", "paraphrase", "history"])
def test_every_candidate_is_valid_for_every_proposer(kind):
    history = [ScoredInstruction(SEED_INSTRUCTION, 40.0)]
    prompt = build_prompt(kind, parent=SEED_INSTRUCTION, n=4, failures=[NO_SEARCH, WRONG], history=history)
    answer = RuleBasedClient(seed=1).complete(prompt)
    parsed = parse_proposal(answer.text, parent=SEED_INSTRUCTION, n=4)
    assert len(parsed.candidates) == 4
    assert parsed.rejected == ()
    assert parsed.critique.startswith("Symptoms in the failures shown")
    assert all(c.startswith(SEED_INSTRUCTION) for c in parsed.candidates)


def test_the_most_frequent_symptom_is_addressed_first():
    prompt = build_prompt("reflection", parent=SEED_INSTRUCTION, n=2, failures=[NO_SEARCH, NO_SEARCH, WRONG])
    parsed = parse_proposal(RuleBasedClient().complete(prompt).text, parent=SEED_INSTRUCTION, n=2)
    search_advice = next(g.sentence for g in GUIDANCE if g.symptom == "no search")
    assert parsed.candidates[0].endswith(search_advice)
    assert "no search (2)" in parsed.critique


def test_the_same_seed_and_prompt_give_the_same_answer_and_guidance_is_not_repeated():
    prompt = build_prompt("paraphrase", parent=SEED_INSTRUCTION, n=3)
    first = RuleBasedClient(seed=4).complete(prompt).text
    assert first == RuleBasedClient(seed=4).complete(prompt).text
    child = parse_proposal(first, parent=SEED_INSTRUCTION, n=3).candidates[0]
    grandchildren = parse_proposal(
        RuleBasedClient(seed=4).complete(build_prompt("paraphrase", parent=child, n=3)).text, parent=child, n=3
    ).candidates
    added = child[len(SEED_INSTRUCTION) :].strip()
    assert all(g.count(added) == 1 for g in grandchildren)


def test_it_says_it_is_not_a_language_model():
    assert "not an LLM" in RuleBasedClient().model


def test_diagnosis_reads_the_protocol():
    assert diagnose("<think>a</think><answer>Lima</answer>") == ["no search"]


def test_answers_that_repeat_the_query_get_advice_to_answer_from_the_passages():
    """The cpu-demo's failure: the policy searched for the question's entity and answered with that query."""
    echo = FailureExample(
        "Which country is larger, Benin or Chad?",
        "<think>look</think><search> Chad </search><information>Doc 1(Title: Chad) …</information>"
        "<answer> chad </answer>",
        ("Chad",),
        0.2,
    )
    assert "answer repeats query" in diagnose(echo.response)
    assert "answer repeats query" not in diagnose(WRONG.response)
    prompt = build_prompt("reflection", parent=SEED_INSTRUCTION, n=2, failures=[echo, echo, WRONG])
    candidates = parse_proposal(RuleBasedClient().complete(prompt).text, parent=SEED_INSTRUCTION, n=2).candidates
    advice = {g.symptom: g.sentence for g in GUIDANCE if "search" in g.symptom or "query" in g.symptom}
    assert candidates == (
        f"{SEED_INSTRUCTION} {advice['wrong after search']}",  # 3 of the 3 failures
        f"{SEED_INSTRUCTION} {advice['answer repeats query']}",  # 2 of them
    )
