"""Reachability on hand-made files whose answers are known (tests/engine/data/reach): the corpus states the answers
of q1-q3 in the passages their questions retrieve, those of q4 and q5 only in unrelated passages, and those of q6-q8
nowhere; and the command line's one line, exactly."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.cli import main
from inspo_engine.env.datasets import load_flashrag_questions
from inspo_engine.env.indexes import CorpusIndex, build_index
from inspo_engine.env.protocol import Passage
from inspo_engine.env.reach import AnswerFinder, corpus_passages, passage_words, reachability, reached_anywhere
from inspo_engine.env.rewards import normalize_answer
from inspo_engine.types import Question

DATA = Path(__file__).parent / "data" / "reach"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus copied out of the tree (hashing it writes its digest beside it)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    shutil.copyfile(DATA / "corpus.jsonl", path)
    return path


@pytest.fixture(scope="module")
def index(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> CorpusIndex:
    return CorpusIndex(build_index("bm25", corpus, tmp_path_factory.mktemp("indexes")))


class Counting:
    """The real index, counting the calls it gets."""

    def __init__(self, index: CorpusIndex) -> None:
        self.index = index
        self.calls: list[int] = []

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        self.calls.append(len(queries))
        return self.index.search(queries, k)


def test_top_k_and_anywhere_differ_where_answers_sit_in_unrelated_passages(index: CorpusIndex, corpus: Path) -> None:
    questions = load_flashrag_questions(DATA / "test.jsonl")
    stages: list[tuple[str, int, int]] = []
    result = reachability(questions, corpus, index, 3, corpus_lines=10, progress=lambda *a: stages.append(a))
    assert (result.questions, result.topk, result.anywhere) == (8, 3, 5)
    assert (result.topk_share, result.anywhere_share) == (0.375, 0.625)
    assert result.nowhere_examples == ["q6", "q7", "q8"]  # "21912" holds no "1912": whole words only
    assert result.missed_examples == ["q4", "q5"]
    assert stages[0] == ("search", 8, 8) and stages[-1] == ("scan", 10, 10)


def test_searches_go_to_the_retriever_in_batches(index: CorpusIndex, corpus: Path) -> None:
    questions = load_flashrag_questions(DATA / "test.jsonl")
    counting = Counting(index)
    result = reachability(questions, corpus, counting, 3, batch=3)  # type: ignore[arg-type]
    assert counting.calls == [3, 3, 2] and result.topk == 3


def test_the_corpus_is_read_once_whatever_the_number_of_questions() -> None:
    reads = 0

    def passages():
        nonlocal reads
        for passage in corpus_passages(DATA / "corpus.jsonl"):
            reads += 1
            yield passage

    many = [Question(f"x{i}", "q", (f"answer {i}",)) for i in range(5_000)]
    many.append(Question("lima", "q", ("Lima",)))
    found = reached_anywhere(many, passages())
    assert reads == 10 and sum(found) == 1 and found[-1]


def test_the_scan_agrees_with_a_whole_word_search_of_every_answer_in_every_passage() -> None:
    rng = random.Random(7)
    vocabulary = ["the", "a", "lima", "peru", "new", "york", "city", "1912", "x-ray", "o'neil", "an", "of"]
    passages = [
        Passage(str(i), "", " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 12)))) for i in range(200)
    ]
    questions = [
        Question(str(i), "q", tuple(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 3))) for _ in "ab"))
        for i in range(300)
    ]
    texts = [f" {normalize_answer(' ' + p.text)} " for p in passages]

    def naive(question: Question) -> bool:
        answers = [normalize_answer(a) for a in question.golden_answers]
        return any(a and f" {a} " in text for a in answers for text in texts)

    assert reached_anywhere(questions, passages) == [naive(q) for q in questions]


def test_the_finder_stops_looking_for_answers_it_has_seen() -> None:
    finder = AnswerFinder([Question("1", "q", ("New York",)), Question("2", "q", ("new york", "York"))])
    finder.feed(["in", "new", "york"])
    assert finder.found == [True, True] and finder.done


def test_data_check_prints_the_line_a_checker_reads(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["data", "check", "--questions", str(DATA / "test.jsonl"), "--corpus", str(corpus)]
    argv += ["--retriever", "bm25", "--k", "3", "--cache-dir", str(tmp_path)]
    assert main(argv) == 0
    assert capsys.readouterr().out == "reachable_topk=0.375 reachable_anywhere=0.625\n"
    assert main([*argv, "--train", str(DATA / "train.jsonl")]) == 0
    assert capsys.readouterr().out == "reachable_topk=0.375 reachable_anywhere=0.625 leaked=2\n"
    assert (tmp_path / "indexes").is_dir()


def test_data_check_refuses_a_bad_k_and_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["data", "check", "--questions", str(DATA / "test.jsonl"), "--cache-dir", str(tmp_path)]
    assert main([*argv, "--k", "0"]) == 2
    assert "--k must be from 1 to 100" in capsys.readouterr().err
    assert main(["data", "check", "--questions", str(tmp_path / "none.jsonl"), "--cache-dir", str(tmp_path)]) == 2
    assert "none.jsonl" in capsys.readouterr().err


PIECES = ["a", "the", "an", "Lima", "é", "’", "-", "_", ".", " ", "\t", "\n", "\x01", "\x1c", "\u212a", "—"]


@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_passage_words_are_the_exact_match_normalisation_split_into_words(text: str) -> None:
    assert passage_words(Passage("1", "", text)) == normalize_answer(f" {text}").split()
