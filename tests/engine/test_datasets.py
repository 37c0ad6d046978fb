"""Loading questions and corpora by name or path: the built-in set and FlashRAG JSONL files."""

from pathlib import Path

import pytest

from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.datasets import (
    DatasetError,
    load_corpus,
    load_flashrag_corpus,
    load_flashrag_questions,
    load_questions,
    split_contents,
)
from inspo_engine.env.protocol import Passage
from inspo_engine.types import Question

DATA = Path(__file__).parent / "data"
TINY = DATA / "flashrag_tiny"


def test_it_reads_flashrag_questions_skipping_blank_lines_and_wrapping_a_single_answer():
    questions = load_flashrag_questions(TINY / "train.jsonl")
    assert questions == [
        Question("train_0", "who wrote the novel moby dick", ("Herman Melville", "Melville")),
        Question("1", "what is the capital city of australia", ("Canberra",)),
        Question("train_2", "which river flows through cairo", ("Nile", "the Nile")),
        Question("train_3", "in which year did the berlin wall fall", ("1989",)),
    ]


def test_a_limit_keeps_the_first_questions():
    assert [q.id for q in load_flashrag_questions(TINY / "train.jsonl", limit=2)] == ["train_0", "1"]


def test_bad_json_is_reported_with_file_and_line_number():
    path = DATA / "broken" / "bad_json.jsonl"
    with pytest.raises(DatasetError, match=r"bad_json\.jsonl:3: invalid JSON"):
        load_flashrag_questions(path)


def test_a_missing_field_is_reported_with_file_line_and_field_name():
    path = DATA / "broken" / "missing_answers.jsonl"
    with pytest.raises(DatasetError, match=r"missing_answers\.jsonl:2: missing field 'golden_answers'"):
        load_flashrag_questions(path)


def test_dataset_errors_are_value_errors():
    assert issubclass(DatasetError, ValueError)


def test_it_reads_a_flashrag_corpus_splitting_the_quoted_title_from_the_text():
    passages = load_flashrag_corpus(DATA / "corpus_tiny.jsonl")
    moby, canberra = passages[:2]
    assert moby == Passage("0", "Moby-Dick", "Moby-Dick is an 1851 novel by the American writer Herman Melville.")
    assert canberra == Passage("1", "Canberra", "Canberra is the capital city of Australia.\nIt was founded in 1913.")
    assert passages[2].id == "2"
    assert passages[3] == Passage("3", "", "A passage whose contents have no title line.")


def test_a_corpus_line_without_contents_is_reported_with_its_line_number():
    with pytest.raises(DatasetError, match=r"corpus_missing_contents\.jsonl:2: missing field 'contents'"):
        load_flashrag_corpus(DATA / "broken" / "corpus_missing_contents.jsonl")


def test_split_contents_keeps_inner_quotes_and_later_lines():
    assert split_contents('"The "Best" Band"\nline one\nline two') == ('The "Best" Band', "line one\nline two")


def test_load_questions_by_name_gives_the_builtin_split():
    assert load_questions("builtin", "dev") == builtin_dataset().dev
    assert load_questions("builtin", "test", limit=3) == builtin_dataset().test[:3]


def test_load_questions_on_a_file_reads_it_and_on_a_directory_reads_the_split_file():
    assert [q.id for q in load_questions(str(TINY / "train.jsonl"))][:1] == ["train_0"]
    assert [q.id for q in load_questions(str(TINY), "dev")] == ["dev_0", "dev_1"]


def test_a_directory_without_the_split_file_names_what_it_found():
    with pytest.raises(DatasetError, match=r"no test\.jsonl.*dev\.jsonl, train\.jsonl"):
        load_questions(str(TINY), "test")


def test_an_unknown_dataset_says_what_was_expected():
    with pytest.raises(DatasetError, match=r"expected 'builtin', a FlashRAG \.jsonl file or a directory"):
        load_questions("nq-please")


def test_an_unknown_builtin_split_is_a_dataset_error():
    with pytest.raises(DatasetError, match="train, dev, test"):
        load_questions("builtin", "validation")


def test_load_corpus_by_name_or_path():
    assert load_corpus("builtin") == builtin_dataset().corpus
    assert len(load_corpus(str(DATA / "corpus_tiny.jsonl"))) == 4
    with pytest.raises(DatasetError, match="expected 'builtin' or a FlashRAG corpus"):
        load_corpus(str(DATA / "nowhere.jsonl"))


def test_the_loader_refuses_a_split_that_is_a_path_before_it_opens_anything(tmp_path):
    benchmark, elsewhere = tmp_path / "nq", tmp_path / "other"
    benchmark.mkdir()
    elsewhere.mkdir()
    (elsewhere / "test.jsonl").write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    for split in ("../other/test", "..", "a/b", "test\n"):
        with pytest.raises(DatasetError, match="is not a split's name"):
            load_questions(str(benchmark), split)


def test_the_config_refuses_a_split_that_is_not_a_name():
    from inspo_engine.config import RunConfig
    from inspo_engine.config_fields import ConfigError

    assert RunConfig.from_dict({"eval": {"split": "dev-2.v1"}}).eval.split == "dev-2.v1"
    for split in ("../teams/2/private/test", "x/../y", "", "test\n", "a" * 65):
        with pytest.raises(ConfigError) as error:
            RunConfig.from_dict({"eval": {"split": split}})
        assert [e.field for e in error.value.errors] == ["eval.split"]


def test_names_that_end_in_a_newline_are_refused():
    from inspo_engine.config import RunConfig
    from inspo_engine.config_fields import ConfigError
    from inspo_engine.experiments import experiment_from_dict

    for fields in ({"project": "nl\n"}, {"wandb_secret": "key\n"}, {"mlflow_uri": "https://m.example\n"}):
        with pytest.raises(ConfigError):
            RunConfig.from_dict({"tracking": fields})
    with pytest.raises(ConfigError) as error:
        experiment_from_dict({"preset": "smoke", "arms": {"static": None, "nl\n": {}}, "seeds": 1})
    assert [e.field for e in error.value.errors] == ["arms.nl\n"]
