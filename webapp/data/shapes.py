"""The shapes a questions record comes in, told apart by their keys, and each read as FlashRAG's `{id, question,
golden_answers}`: FlashRAG's own, verl's (`prompt`, `reward_model.ground_truth`, `extra_info`), nq_open's
(`question`, `answer`), TriviaQA's (`question`, `answer.value` / `answer.aliases`), or a team's own named by a field
mapping of dotted paths. It knows records and keys, not files, limits or storage; `formats` checks what it reads.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7}")
"""A mapping field: identifiers joined by dots, at most 8 deep."""
MAX_FIELD_PATH = 200
MAPPING_FIELDS = ("question_field", "answers_field", "id_field")
NUMBERED = "line number"
"""Where a record with none of its shape's id fields takes its id from (a parquet's row number)."""


class ShapeUnknown(ValueError):
    """A first record whose keys match no shape and no mapping."""


@dataclass(frozen=True)
class FieldMap:
    """A team's own names for a questions record's fields, as dotted paths (`extra_info.answer`); blank: the
    detected shape's."""

    question: str = ""
    answers: str = ""
    id: str = ""

    def __bool__(self) -> bool:
        return bool(self.question or self.answers or self.id)

    def errors(self) -> dict[str, list[str]]:
        """What is wrong with each field, by its form name."""
        errors: dict[str, list[str]] = {}
        for name, path in zip(MAPPING_FIELDS, (self.question, self.answers, self.id), strict=True):
            if path and (len(path) > MAX_FIELD_PATH or not FIELD_PATH.fullmatch(path)):
                errors[name] = [
                    "a dotted path of names (letters, digits, '_'; such as extra_info.answer), at most 8 deep and "
                    f"{MAX_FIELD_PATH} characters"
                ]
        return errors


NO_MAPPING = FieldMap()


@dataclass(frozen=True)
class Shape:
    """Where a shape keeps each field: dotted paths tried in order (the first present is read)."""

    name: str
    question: tuple[str, ...]
    answers: tuple[str, ...]
    ids: tuple[str, ...]
    numbered: bool
    """A record with none of `ids` takes its line (row) number as its id."""
    prompt: bool = False
    """The question is a prompt: a chat's last user turn, the text after its 'Question:' when it has one."""


FLASHRAG = Shape("flashrag", ("question",), ("golden_answers",), ("id",), numbered=False)
VERL = Shape(
    "verl", ("prompt",), ("reward_model.ground_truth", "extra_info.answer", "golden_answers"),
    ("id", "extra_info.index"), numbered=True, prompt=True,
)  # fmt: skip
NQ_OPEN = Shape("nq_open", ("question",), ("answer",), ("id",), numbered=True)
TRIVIAQA = Shape("triviaqa", ("question",), ("answer",), ("question_id", "id"), numbered=True)
KNOWN = "flashrag (question, golden_answers), verl (prompt, reward_model.ground_truth or extra_info.answer), nq_open "
KNOWN += "(question, answer), triviaqa (question, answer.value and answer.aliases)"


def detect(first: Any, *, keys: Collection[str] | None = None, mapping: FieldMap = NO_MAPPING, rows: bool) -> Shape:
    """The shape of a file whose first record is `first` (its `keys`: a parquet's columns), with `mapping` over it;
    ShapeUnknown naming the keys it has. `rows`: a parquet, whose FlashRAG records may go without ids."""
    names = set(keys if keys is not None else first if isinstance(first, dict) else ())
    shape: Shape | None = None
    if {"question", "golden_answers"} <= names:
        shape = Shape(FLASHRAG.name, FLASHRAG.question, FLASHRAG.answers, FLASHRAG.ids, numbered=rows)
    elif "prompt" in names and names & {"reward_model", "extra_info", "golden_answers"}:
        shape = VERL
    elif {"question", "answer"} <= names:
        answer = at(first, "answer") if isinstance(first, dict) else None
        shape = TRIVIAQA if isinstance(answer, dict) and names_of(answer) & {"value", "aliases"} else NQ_OPEN
    if mapping:
        base = shape or Shape("mapping", ("question",), ("golden_answers",), ("id",), numbered=True)
        mapped = Shape(
            base.name if shape is None else f"{base.name}+mapping",
            (mapping.question,) if mapping.question else base.question,
            (mapping.answers,) if mapping.answers else base.answers,
            (mapping.id,) if mapping.id else base.ids,
            numbered=not mapping.id and base.numbered,
            prompt=base.prompt and not mapping.question,
        )
        if shape is not None or all(p.split(".")[0] in names for p in (mapped.question[0], mapped.answers[0])):
            return mapped
    if shape is None:
        raise ShapeUnknown(
            "a questions file needs the columns question and golden_answers (keys in JSONL), or those of another shape "
            f"it reads: {KNOWN}; it has {_listed(names)}. Name your own fields with question_field, answers_field "
            "and id_field (dotted paths, such as extra_info.answer)"
        )
    return shape


def ids_from(shape: Shape, first: Any) -> str:
    """Which field the ids come from in the first record (or that they are its line numbers)."""
    found = next((p for p in shape.ids if isinstance(first, dict) and at(first, p) is not None), None)
    return found or (NUMBERED if shape.numbered else shape.ids[0])


def read(record: Any, shape: Shape, number: int) -> tuple[Any, dict[str, str]]:
    """The record as FlashRAG names its fields (values as found, for `formats` to check), and the source path of
    each canonical field (for its messages)."""
    if not isinstance(record, dict) or shape.name == FLASHRAG.name:
        if shape.numbered and isinstance(record, dict) and record.get("id") is None:
            return {**record, "id": number}, {}
        return record, {}
    question_path, question = _first(record, shape.question)
    answers_path, answers = _first(record, shape.answers)
    id_path, identifier = _first(record, shape.ids)
    if identifier is None and shape.numbered:
        identifier = number
    read_record = {
        "id": identifier,
        "question": prompt_text(question) if shape.prompt else question,
        "golden_answers": answer_list(answers),
    }
    return read_record, {"id": id_path, "question": question_path, "golden_answers": answers_path}


def at(record: Any, path: str) -> Any:
    """The value at a dotted path, or None; a string holding a JSON object on the way is read as one (a parquet
    column of JSON strings)."""
    value = record
    for name in path.split("."):
        value = _decoded(value, "{")
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


def prompt_text(value: Any) -> Any:
    """A verl prompt's question: a chat's last user turn (a JSON string of one too), or a string; the text after its
    last 'Question:' when it has one."""
    value = _decoded(value, "[")
    if isinstance(value, list):
        users = [t.get("content") for t in value if isinstance(t, dict) and t.get("role") == "user"]
        value = users[-1] if users else None
    if isinstance(value, str) and "Question:" in value:
        return value.rsplit("Question:", 1)[-1].strip()
    return value


def answer_list(value: Any) -> Any:
    """Answers as a list: a string is one answer, `{target: [...]}` its target, TriviaQA's `{value, aliases}` the
    value then the other aliases; a JSON string of a list or an object is read first. Anything else is returned as
    it is, for the check to refuse."""
    value = _decoded(_decoded(value, "["), "{")
    if isinstance(value, dict):
        if "target" in value:
            return answer_list(value["target"])
        if "value" in value or "aliases" in value:
            main, aliases = value.get("value"), value.get("aliases")
            found = ([main] if isinstance(main, str) else []) + (aliases if isinstance(aliases, list) else [])
            return list(dict.fromkeys(found)) or None
    return [value] if isinstance(value, str) else value


def names_of(value: Mapping[str, Any]) -> set[str]:
    return set(value)


def _first(record: dict[str, Any], paths: tuple[str, ...]) -> tuple[str, Any]:
    for path in paths:
        value = at(record, path)
        if value is not None:
            return path, value
    return paths[0], None


def _decoded(value: Any, opener: str) -> Any:
    if isinstance(value, str) and value.lstrip().startswith(opener):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _listed(names: Collection[str]) -> str:
    shown = sorted(str(n)[:40] for n in names)
    return ("the keys " + ", ".join(shown[:30]) + (" …" if len(shown) > 30 else "")) if shown else "no keys"
