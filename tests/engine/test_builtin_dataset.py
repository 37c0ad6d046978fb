"""The built-in offline QA set: deterministic, disjoint splits, every kind everywhere, answers grounded in passages."""

import os
import re
import subprocess
import sys

import pytest

from inspo_engine.env.builtin import KINDS, SPLITS, builtin_dataset, question_kind, stats_markdown
from inspo_engine.env.rewards import normalize_answer

DIGEST_SCRIPT = """
import hashlib, json
from inspo_engine.env.builtin import builtin_dataset
d = builtin_dataset()
rows = [[s, q.id, q.text, list(q.golden_answers)] for s in ("train", "dev", "test") for q in d.split(s)]
rows += [[p.id, p.title, p.text] for p in d.corpus]
rows += sorted([k, list(v)] for k, v in d.evidence.items())
print(hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest())
"""


def _digest_in_fresh_process(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _country_of(question_id: str) -> set[str]:
    return {e.rsplit("-", 1)[-1] for e in builtin_dataset().evidence[question_id]}


@pytest.mark.slow
def test_it_builds_the_same_dataset_in_processes_with_different_hash_seeds():
    assert _digest_in_fresh_process("1") == _digest_in_fresh_process("4242")


def test_every_split_holds_questions_of_all_three_kinds():
    data = builtin_dataset()
    for name in SPLITS:
        assert {question_kind(q) for q in data.split(name)} == set(KINDS), name


def test_splits_share_no_question_and_no_country():
    data = builtin_dataset()
    ids = {name: {q.id for q in data.split(name)} for name in SPLITS}
    texts = {name: {q.text for q in data.split(name)} for name in SPLITS}
    countries = {name: set().union(*(_country_of(q.id) for q in data.split(name))) for name in SPLITS}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not ids[a] & ids[b]
        assert not texts[a] & texts[b]
        assert not countries[a] & countries[b]


def test_question_ids_are_unique_and_name_their_kind():
    data = builtin_dataset()
    questions = [q for name in SPLITS for q in data.split(name)]
    assert len({q.id for q in questions}) == len(questions)
    assert all(q.id.startswith(f"builtin-{question_kind(q)}-") and q.id[-5:].isdigit() for q in questions)


def test_every_single_hop_answer_is_written_in_the_corpus_and_the_main_one_in_its_supporting_passage():
    data = builtin_dataset()
    passages = {p.id: f" {normalize_answer(p.text)} " for p in data.corpus}
    everything = "".join(passages.values())
    for name in SPLITS:
        for q in data.split(name):
            if question_kind(q) != "single":
                continue
            (evidence,) = data.evidence[q.id]
            assert f" {normalize_answer(q.golden_answers[0])} " in passages[evidence], q
            for answer in q.golden_answers:  # aliases of a neighbour may be stated in the neighbour's passage
                assert f" {normalize_answer(answer)} " in everything, (q, answer)


def test_bridge_questions_need_the_capital_passage_and_then_the_country_passage():
    data = builtin_dataset()
    texts = {p.id: p.text for p in data.corpus}
    bridge = [q for q in data.train if question_kind(q) == "bridge"]
    for q in bridge:
        capital_id, country_id = data.evidence[q.id]
        capital = q.text.rstrip("?").rsplit("capital is ", 1)[1]
        assert texts[capital_id].startswith(f"{capital} is the capital city of ")
        assert not set(re.findall(r"\w+", capital)) & set(re.findall(r"\w+", texts[country_id])), q
        assert any(normalize_answer(a) in normalize_answer(texts[country_id]) for a in q.golden_answers)


def test_comparison_answers_name_one_of_the_two_countries_compared():
    data = builtin_dataset()
    titles = {p.id: p.title for p in data.corpus}
    comparisons = [q for name in SPLITS for q in data.split(name) if question_kind(q) == "comparison"]
    assert comparisons
    for q in comparisons:
        first, second = (titles[e] for e in data.evidence[q.id])
        assert q.text.endswith(f"{first} or {second}?")
        assert q.golden_answers[0] in (first, second)


def test_gold_answers_carry_aliases_the_passages_state():
    data = builtin_dataset()
    by_text = {q.text: q for name in SPLITS for q in data.split(name)}
    peru = next(q for text, q in by_text.items() if "currency" in text and text.endswith(" Peru?"))
    assert {"Sol", "PEN"} <= set(peru.golden_answers)
    calling = next(q for text, q in by_text.items() if "code of Chile" in text)
    assert set(calling.golden_answers) == {"+56", "56"}


def test_stats_count_every_question_and_passage():
    data = builtin_dataset()
    stats = data.stats()
    for name in SPLITS:
        assert stats[name]["total"] == len(data.split(name)) == sum(stats[name][kind] for kind in KINDS)
    assert stats["corpus"]["passages"] == len(data.corpus) == stats["corpus"]["countries"] * 2
    table = stats_markdown()
    assert f"| train | {stats['train']['single']} |" in table
    assert f"{stats['corpus']['passages']} passages" in table


def test_an_unknown_split_name_lists_the_real_ones():
    with pytest.raises(ValueError, match="train, dev, test"):
        builtin_dataset().split("validation")


def test_it_is_built_once_per_process():
    assert builtin_dataset() is builtin_dataset()
