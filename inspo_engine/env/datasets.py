"""Questions and passage corpora by name or path (the built-in set and FlashRAG JSONL files) and the seeded samples of
them that runs are evaluated on; no retrieval."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inspo_engine.config import EvalConfig, split_errors
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.protocol import Passage
from inspo_engine.types import Question

BUILTIN = "builtin"


class DatasetError(ValueError):
    """A dataset or corpus could not be found or read; the message names the file and line."""


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) for every non-blank line of a JSONL file."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as error:
        raise DatasetError(f"{path}: cannot open ({error.strerror or error})") from error
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(f"{path}:{number}: invalid JSON ({error.msg})") from error
            if not isinstance(record, dict):
                raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record


def _field(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record or record[key] is None:
        raise DatasetError(f"{where}: missing field {key!r}")
    return record[key]


def _identifier(record: dict[str, Any], where: str) -> str:
    value = _field(record, "id", where)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise DatasetError(f"{where}: 'id' must be a string or an integer")
    return str(value)


def _golden_answers(record: dict[str, Any], where: str) -> tuple[str, ...]:
    value = _field(record, "golden_answers", where)
    answers = [value] if isinstance(value, str) else value
    if not isinstance(answers, list) or not all(isinstance(a, str | int | float) for a in answers):
        raise DatasetError(f"{where}: 'golden_answers' must be a string or a list of strings")
    if not answers:
        raise DatasetError(f"{where}: 'golden_answers' is empty")
    return tuple(str(a) for a in answers)


def load_flashrag_questions(path: Path, *, limit: int | None = None) -> list[Question]:
    """Questions from a FlashRAG JSONL file: `{"id", "question", "golden_answers"}` per line; at most `limit`."""
    questions: list[Question] = []
    for number, record in _records(path):
        if limit is not None and len(questions) >= limit:
            break
        where = f"{path}:{number}"
        text = _field(record, "question", where)
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: 'question' must be a non-empty string")
        questions.append(Question(_identifier(record, where), text.strip(), _golden_answers(record, where)))
    return questions


def split_contents(contents: str) -> tuple[str, str]:
    """FlashRAG/Search-R1 `contents` → (title, text): the first line, unquoted, is the title.

    >>> split_contents('"Lima"\\nLima is the capital of Peru.')
    ('Lima', 'Lima is the capital of Peru.')
    >>> split_contents("no title line")
    ('', 'no title line')
    """
    title, newline, text = contents.partition("\n")
    if not newline:
        return "", contents.strip()
    return title.strip().strip('"').strip(), text.strip()


def join_contents(passage: Passage) -> str:
    """The inverse of `split_contents`.

    >>> join_contents(Passage("1", "Lima", "Lima is the capital of Peru."))
    '"Lima"\\nLima is the capital of Peru.'
    """
    return f'"{passage.title}"\n{passage.text}'


def load_flashrag_corpus(path: Path) -> list[Passage]:
    """Passages from a FlashRAG corpus JSONL file: `{"id", "contents": "\\"Title\\"\\ntext"}` per line."""
    passages = []
    for number, record in _records(path):
        where = f"{path}:{number}"
        contents = _field(record, "contents", where)
        if not isinstance(contents, str):
            raise DatasetError(f"{where}: 'contents' must be a string")
        title, text = split_contents(contents)
        passages.append(Passage(_identifier(record, where), title, text))
    return passages


def load_questions(name_or_path: str, split: str = "train", *, limit: int | None = None) -> list[Question]:
    """'builtin' (its `split`), a FlashRAG .jsonl file (`split` ignored), or a directory holding `<split>.jsonl`."""
    if name_or_path == BUILTIN:
        try:
            return builtin_dataset().split(split)[:limit]
        except ValueError as error:
            raise DatasetError(str(error)) from error
    path = Path(name_or_path)
    if path.is_file():
        return load_flashrag_questions(path, limit=limit)
    if path.is_dir():
        if split_errors(split, "split"):  # checked at admission too; a split is a file name, never a path
            raise DatasetError(f"{split!r} is not a split's name")
        file = path / f"{split}.jsonl"
        if not file.is_file():
            found = ", ".join(sorted(p.name for p in path.glob("*.jsonl"))) or "no .jsonl files"
            raise DatasetError(f"{path}: no {split}.jsonl for split {split!r} (found: {found})")
        return load_flashrag_questions(file, limit=limit)
    raise DatasetError(
        f"unknown dataset {name_or_path!r}: expected 'builtin', a FlashRAG .jsonl file "
        "or a directory holding <split>.jsonl files"
    )


def sample_questions(questions: Sequence[Question], size: int, *, seed: int) -> list[Question]:
    """`size` of the questions drawn without replacement by `seed` (all of them when there are no more), in the
    benchmark's order: the same benchmark, size and seed give the same questions, so results on them compare.

    >>> qs = [Question(str(i), f"q{i}", ("a",)) for i in range(10)]
    >>> [q.id for q in sample_questions(qs, 4, seed=1)] == [q.id for q in sample_questions(qs, 4, seed=1)]
    True
    >>> len(sample_questions(qs, 4, seed=1)), len(sample_questions(qs, 40, seed=1))
    (4, 10)
    """
    if size >= len(questions):
        return list(questions)
    picked = sorted(random.Random(seed).sample(range(len(questions)), size))
    return [questions[i] for i in picked]


def eval_questions(evaluation: EvalConfig, benchmark: str) -> list[Question]:
    """The questions a run is evaluated on: the benchmark's `split` (a FlashRAG file is its own), then its first
    `eval_samples` (0 = all), or with a `sample_seed` that many drawn by the seed, so every run of an experiment
    answers the same ones."""
    limit = evaluation.eval_samples or None
    if evaluation.sample_seed is None:
        return load_questions(benchmark, evaluation.split, limit=limit)
    questions = load_questions(benchmark, evaluation.split)
    return sample_questions(questions, limit or len(questions), seed=evaluation.sample_seed)


def load_corpus(name_or_path: str) -> list[Passage]:
    """'builtin' or a FlashRAG corpus .jsonl file."""
    if name_or_path == BUILTIN:
        return list(builtin_dataset().corpus)
    path = Path(name_or_path)
    if path.is_file():
        return load_flashrag_corpus(path)
    raise DatasetError(f"unknown corpus {name_or_path!r}: expected 'builtin' or a FlashRAG corpus .jsonl file")
