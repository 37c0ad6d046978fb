"""Uploading data through the API: FlashRAG JSONL, Search-R1 parquet and gzip of either become versions of a named
dataset, checked while they stream; the same content twice is the same version; a new upload under a name is a new
version and none is overwritten; every hostile file is a clear 4xx with nothing kept."""

from __future__ import annotations

import json

import pytest

from tests.webapp.data.conftest import corpus, gz, jsonl, parquet, questions, upload
from webapp.data.models import Dataset, DatasetVersion

pytestmark = pytest.mark.django_db


def stored_files(store):
    return sorted(p.name for p in store.rglob("*") if p.is_file()) if store.exists() else []


def test_a_flashrag_file_becomes_version_1_and_reads_back_as_uploaded(alice, api, data_storage):
    response = upload(api(alice), jsonl(questions(8)), split="test")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["number"], body["split"], body["records"], body["created"]) == (1, "test", 8, True)
    assert body["dataset"]["reference"] == "data:mine" and body["dataset"]["splits"] == {"test": 8}
    version = DatasetVersion.objects.get()
    stored = (data_storage / version.file).read_text().splitlines()
    assert [json.loads(line) for line in stored] == questions(8)
    assert sum(version.lengths.values()) == 8 and version.lengths["≤2"] == 8  # "City i": two words


def test_the_same_content_twice_is_the_same_version_and_a_new_one_is_the_next(alice, api, data_storage):
    client = api(alice)
    first = upload(client, jsonl(questions(8))).json()
    again = upload(client, jsonl(questions(8)), name="other-name")
    assert again.status_code == 200 and again.json()["number"] == 1 and again.json()["created"] is False
    assert again.json()["dataset"]["reference"] == "data:mine"  # the content is that dataset already
    second = upload(client, jsonl(questions(9)))
    assert second.status_code == 201 and second.json()["number"] == 2
    assert Dataset.objects.count() == 1 and DatasetVersion.objects.count() == 2
    v1, v2 = DatasetVersion.objects.order_by("number")
    assert v1.sha256 == first["sha256"] and v1.sha256 != v2.sha256
    assert len((data_storage / v1.file).read_text().splitlines()) == 8  # never overwritten


def test_a_split_added_later_joins_the_dataset_as_the_next_version(alice, api):
    client = api(alice)
    upload(client, jsonl(questions(8)))
    response = upload(client, jsonl(questions(4, prefix="t")), split="test")
    assert response.json()["number"] == 2 and response.json()["dataset"]["splits"] == {"test": 4, "train": 8}


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("q.jsonl.gz", gz(jsonl(questions(5)))),
        ("q.parquet", parquet({"id": ["a", "b"], "question": ["x?", "y?"], "golden_answers": [["1"], ["2", "two"]]})),
        (
            "nq_train.parquet",  # Search-R1's layout: the question in the prompt, the answers in reward_model
            parquet(
                {
                    "prompt": [[{"role": "user", "content": "Answer it.\nQuestion: who wrote Hamlet?\n"}]],
                    "reward_model": [{"ground_truth": {"target": ["Shakespeare"]}, "style": "rule"}],
                }
            ),
        ),
        ("q.parquet.gz", gz(parquet({"question": ["x?"], "golden_answers": [["1"]]}))),
    ],
)
def test_every_accepted_format_becomes_the_same_canonical_jsonl(alice, api, data_storage, filename, content):
    response = upload(api(alice), content, filename=filename)
    assert response.status_code == 201, response.json()
    lines = [json.loads(line) for line in (data_storage / DatasetVersion.objects.get().file).read_text().splitlines()]
    assert all(set(line) == {"id", "question", "golden_answers"} for line in lines)
    if filename.startswith("nq_train"):
        assert lines == [{"id": "1", "question": "who wrote Hamlet?", "golden_answers": ["Shakespeare"]}]


def test_a_corpus_has_no_splits_and_keeps_its_contents(alice, api, data_storage):
    response = upload(api(alice), jsonl(corpus(12)), filename="wiki.jsonl", name="wiki", kind="corpus")
    assert response.status_code == 201 and response.json()["split"] == "corpus"
    refused = upload(api(alice), jsonl(corpus(3)), filename="w.jsonl", name="wiki2", kind="corpus", split="test")
    assert refused.status_code == 400 and "split" in refused.json()


def deep(levels: int) -> bytes:
    return (
        '{"id": "1", "question": "q", "golden_answers": ["a"], "meta": ' + "[" * levels + "]" * levels + "}\n"
    ).encode()


HOSTILE = [
    ({"name": "../escape"}, jsonl(questions(2)), "q.jsonl", 400, "name"),
    ({"name": "a/b"}, jsonl(questions(2)), "q.jsonl", 400, "name"),
    ({}, b'{"id": "1", "question": "q", "golden_answers": ["\xff\xfe"]}\n', "q.jsonl", 400, "line 1: not valid UTF-8"),
    ({}, b'{"id": "1", "question": "' + b"x" * 3_000_000 + b'"}\n', "q.jsonl", 400, "line 1 is longer than"),
    ({}, deep(50_000), "q.jsonl", 400, "line 1: JSON nested"),
    ({}, deep(12), "q.jsonl", 400, "nested more than 8 levels"),
    ({}, jsonl(questions(3) + questions(1)), "q.jsonl", 400, "line 4: field 'id' repeats 'q0' of line 1"),
    ({}, jsonl([{"id": "1", "question": "q", "golden_answers": []}]), "q.jsonl", 400, "line 1: field 'golden_answers'"),
    ({}, jsonl(questions(2)) + b"{not json\n", "q.jsonl", 400, "line 3: invalid JSON"),
    ({}, parquet({"query": ["x"], "answer": ["y"]}), "q.parquet", 400, "needs the columns question and golden_answers"),
    (
        {},
        parquet({"question": ["x", "y"], "golden_answers": [["1"], []]}),
        "q.parquet",
        400,
        "row 2: field 'golden_answers'",
    ),
    ({}, b"PAR1 not really", "q.parquet", 400, "not a parquet file"),
    ({}, jsonl(questions(2)), "q.csv", 400, "must end in"),
    ({}, jsonl(questions(2)), "q.jsonl.gz", 400, "is not gzip"),
    ({}, b"\n  \n", "q.jsonl", 400, "holds no records"),
]


@pytest.mark.parametrize(("fields", "content", "filename", "status", "message"), HOSTILE)
def test_a_hostile_upload_is_a_clear_4xx_and_nothing_is_kept(
    alice, api, data_storage, fields, content, filename, status, message
):
    response = upload(api(alice), content, filename=filename, **fields)
    assert response.status_code == status, response.json()
    assert message in json.dumps(response.json(), ensure_ascii=False)
    assert not Dataset.objects.exists() and not DatasetVersion.objects.exists()
    assert stored_files(data_storage) == []


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_by_its_expansion_ratio(alice, api, data_storage):
    line = jsonl(questions(1))
    bomb = gz(line + b"\n" * 50_000_000)  # 50 MB of blank lines in about 50 kB
    response = upload(api(alice), bomb, filename="bomb.jsonl.gz")
    assert response.status_code == 400 and "compression bomb" in response.json()["file"][0]
    assert stored_files(data_storage) == []


def test_a_file_over_the_limit_is_a_413_while_it_streams(alice, api, settings, data_storage):
    settings.INSPO_DATA_MAX_UPLOAD_BYTES = 4096
    response = upload(api(alice), jsonl(questions(200)), filename="big.jsonl")
    assert response.status_code == 413 and "upload limit of 4,096 bytes" in response.json()["detail"]
    assert not Dataset.objects.exists() and stored_files(data_storage) == []


def test_the_teams_total_is_a_400_that_says_what_is_left(alice, api, settings):
    settings.INSPO_DATA_TEAM_MAX_BYTES = 2000
    client = api(alice)
    assert upload(client, jsonl(questions(8))).status_code == 201
    response = upload(client, jsonl(questions(20, prefix="x")), name="more")
    assert response.status_code == 400 and "over its limit of 2,000" in response.json()["file"][0]
    assert DatasetVersion.objects.count() == 1


def test_a_name_of_the_other_kind_is_refused(alice, api):
    client = api(alice)
    upload(client, jsonl(questions(2)))
    response = upload(client, jsonl(corpus(2)), filename="c.jsonl", kind="corpus")
    assert response.status_code == 400 and "is a questions dataset" in response.json()["kind"][0]


@pytest.mark.parametrize("name", ["nl\n", " nl", "nl "])
def test_the_name_is_checked_as_sent_before_the_content_is_matched(alice, api, name):
    client = api(alice)
    assert upload(client, jsonl(questions(2)), name="nl").status_code == 201
    response = upload(client, jsonl(questions(2)), name=name)  # the same content as data:nl
    assert response.status_code == 400 and list(response.json()) == ["name"], response.json()
    assert DatasetVersion.objects.count() == 1


def test_a_bad_name_is_refused_before_the_file_is_read(alice, api):
    response = upload(api(alice), b"{not json\n", name="a b")
    assert response.status_code == 400 and list(response.json()) == ["name"], response.json()


def test_a_corpus_under_a_questions_name_is_refused_before_its_file_is_stored(alice, api, data_storage):
    client = api(alice)
    upload(client, jsonl(questions(2)))
    kept = stored_files(data_storage)
    response = upload(client, jsonl(corpus(3)), filename="c.jsonl", kind="corpus")
    assert response.status_code == 400 and "is a questions dataset" in response.json()["kind"][0]
    assert stored_files(data_storage) == kept and DatasetVersion.objects.count() == 1


NUL_RECORDS = [
    ("questions", {"id": "1", "question": "who\x00?", "golden_answers": ["a"]}, "line 1: field 'question'"),
    ("questions", {"id": "1", "question": "who?", "golden_answers": ["a", "b\x00"]}, "field 'golden_answers'"),
    ("questions", {"id": "1\x00", "question": "who?", "golden_answers": ["a"]}, "line 1: field 'id'"),
    ("corpus", {"id": "p1", "contents": "\x00Title\nText"}, "line 1: field 'contents'"),
]


@pytest.mark.parametrize(("kind", "record", "message"), NUL_RECORDS)
def test_a_nul_character_in_a_text_field_is_refused_naming_the_line_and_field(
    alice, api, data_storage, kind, record, message
):
    response = upload(api(alice), jsonl([record]), kind=kind)
    assert response.status_code == 400, response.json()
    assert message in response.json()["file"][0] and "NUL" in response.json()["file"][0]
    assert not DatasetVersion.objects.exists() and stored_files(data_storage) == []


def test_a_nul_character_in_a_parquet_row_is_refused(alice, api):
    content = parquet({"question": ["fine?", "who\x00?"], "golden_answers": [["a"], ["b"]]})
    response = upload(api(alice), content, filename="q.parquet")
    assert response.status_code == 400 and "row 2: field 'question'" in response.json()["file"][0]


def test_a_parquet_that_expands_like_a_bomb_is_refused(alice, api, data_storage):
    rows = 2000
    content = parquet({"question": ["x" * 4000] * rows, "golden_answers": [["a"]] * rows})
    assert len(content) < 20_000  # 8 MB of records in a few kB
    response = upload(api(alice), content, filename="bomb.parquet")
    assert response.status_code == 400 and "expand more than 100×" in response.json()["file"][0], response.json()
    assert stored_files(data_storage) == []


def test_a_parquet_row_longer_than_a_jsonl_line_may_be_is_refused(alice, api):
    content = parquet({"question": ["x" * (2 << 20)], "golden_answers": [["a"]]})
    response = upload(api(alice), content, filename="long.parquet")
    assert response.status_code == 400 and "row 1 is longer than 1,048,576 bytes" in response.json()["file"][0]


def test_the_teams_total_stops_the_canonical_file_while_it_is_written(alice, api, settings, monkeypatch):
    from webapp.data import formats

    settings.INSPO_DATA_TEAM_MAX_BYTES = 2000
    written = []
    add = formats._Writer.add
    monkeypatch.setattr(
        formats._Writer, "add", lambda self, record, line: written.append(line) or add(self, record, line)
    )
    response = upload(api(alice), jsonl(questions(200)))
    assert response.status_code == 400 and "would hold more than 2,000 bytes" in response.json()["file"][0]
    assert len(written) < 40  # stopped at the limit, not after the 200 records


def damaged_snappy() -> bytes:
    import io
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    words = random.Random(1).choices(["alpha", "beta", "gamma", "delta", "epsilon"], k=40_000)
    table = pa.table(
        {"question": [" ".join(words[i : i + 20]) for i in range(0, 40_000, 20)], "golden_answers": [["a"]] * 2000}
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="snappy", use_dictionary=False)
    data = bytearray(buffer.getvalue())
    middle = len(data) // 3
    data[middle : middle + 64] = b"\xff" * 64
    return bytes(data)


def not_utf8() -> bytes:
    import pyarrow as pa

    text = pa.array([b"fine?", b"caf\xe9?"], pa.binary()).view(pa.string())
    return parquet({"question": text, "golden_answers": [["a"], ["b"]]})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            lambda: parquet({"prompt": [[{"role": "user", "content": "Question: 6 × 12?"}]], "reward_model": ["72"]}),
            "row 1: ",
        ),
        (damaged_snappy, "unreadable"),
        (not_utf8, "row 2: field 'question': not valid UTF-8"),
    ],
    ids=["reward-model-a-string", "damaged-snappy-page", "not-utf-8"],
)
def test_a_parquet_that_cannot_be_read_is_a_400_naming_the_problem(alice, api, data_storage, content, message):
    response = upload(api(alice), content(), filename="q.parquet")
    assert response.status_code == 400, response.content
    assert message in response.json()["file"][0], response.json()
    assert stored_files(data_storage) == []
