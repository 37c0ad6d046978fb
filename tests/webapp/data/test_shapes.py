"""Questions files in the shapes teams already have: verl's (parquet and JSONL), nq_open's, TriviaQA's, and a team's
own named by a field mapping; each detected and named in the answer, and a shape it does not know a 400 that lists
the keys the file has and the mapping fields."""

from __future__ import annotations

import json

import pytest

from tests.webapp.data.conftest import jsonl, parquet, upload
from webapp.data.models import Dataset, DatasetVersion

pytestmark = pytest.mark.django_db


def stored(data_storage):
    version = DatasetVersion.objects.get()
    return [json.loads(line) for line in (data_storage / version.file).read_text().splitlines()]


def chat(question):
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": f"Question: {question}"}]


def test_a_verl_parquet_with_string_ground_truth_uploads(alice, api, data_storage):
    content = parquet(
        {
            "data_source": ["gsm8k", "gsm8k"],
            "prompt": [chat("how many legs has a cat?"), chat("what is 8 times 9?")],
            "reward_model": [{"style": "rule", "ground_truth": "4"}, {"style": "rule", "ground_truth": "72"}],
            "extra_info": [{"split": "train", "index": 10}, {"split": "train", "index": 11}],
        }
    )
    response = upload(api(alice), content, filename="gsm8k.parquet")
    assert response.status_code == 201, response.json()
    assert (response.json()["detected_shape"], response.json()["ids_from"]) == ("verl", "extra_info.index")
    assert stored(data_storage) == [
        {"id": "10", "question": "how many legs has a cat?", "golden_answers": ["4"]},
        {"id": "11", "question": "what is 8 times 9?", "golden_answers": ["72"]},
    ]


def test_a_verl_jsonl_without_ids_takes_its_line_numbers_and_every_ground_truth_form(alice, api, data_storage):
    records = [
        {"prompt": chat("who wrote hamlet?"), "reward_model": {"ground_truth": {"target": ["Shakespeare"]}}},
        {"prompt": "Question: capital of france?", "reward_model": {"ground_truth": ["Paris", "paris"]}},
        {"prompt": chat("largest planet?"), "reward_model": {"style": "rule"}, "extra_info": {"answer": ["Jupiter"]}},
    ]
    response = upload(api(alice), jsonl(records), filename="search.jsonl")
    assert response.status_code == 201, response.json()
    assert (response.json()["detected_shape"], response.json()["ids_from"]) == ("verl", "line number")
    assert stored(data_storage) == [
        {"id": "1", "question": "who wrote hamlet?", "golden_answers": ["Shakespeare"]},
        {"id": "2", "question": "capital of france?", "golden_answers": ["Paris", "paris"]},
        {"id": "3", "question": "largest planet?", "golden_answers": ["Jupiter"]},
    ]


def test_an_nq_open_jsonl_and_a_triviaqa_record_upload(alice, api, data_storage):
    client = api(alice)
    nq = [{"question": "who sang hey jude", "answer": ["The Beatles"]}, {"question": "h2o is", "answer": "water"}]
    response = upload(client, jsonl(nq), filename="nq_open.jsonl", name="nq")
    assert response.status_code == 201 and response.json()["detected_shape"] == "nq_open", response.json()
    trivia = {
        "question_id": "tc_1",
        "question": "Which planet is the red planet?",
        "answer": {"value": "Mars", "aliases": ["Mars", "The Red Planet"], "normalized_value": "mars"},
    }
    response = upload(client, jsonl([trivia]), filename="trivia.jsonl", name="trivia")
    assert response.status_code == 201, response.json()
    assert (response.json()["detected_shape"], response.json()["ids_from"]) == ("triviaqa", "question_id")
    files = {v.dataset.name: v.file for v in DatasetVersion.objects.select_related("dataset")}
    lines = lambda name: [json.loads(x) for x in (data_storage / files[name]).read_text().splitlines()]  # noqa: E731
    assert lines("nq")[1] == {"id": "2", "question": "h2o is", "golden_answers": ["water"]}
    assert lines("trivia") == [
        {"id": "tc_1", "question": "Which planet is the red planet?", "golden_answers": ["Mars", "The Red Planet"]}
    ]


def test_parquet_columns_of_json_strings_read_like_nested_structs(alice, api, data_storage):
    content = parquet(
        {
            "prompt": [json.dumps(chat("who wrote hamlet?"))],
            "reward_model": [json.dumps({"ground_truth": {"target": ["Shakespeare"]}})],
        }
    )
    response = upload(api(alice), content, filename="strings.parquet")
    assert response.status_code == 201, response.json()
    assert stored(data_storage) == [{"id": "1", "question": "who wrote hamlet?", "golden_answers": ["Shakespeare"]}]


def test_a_field_mapping_reads_a_shape_of_the_teams_own(alice, api, data_storage):
    records = [{"meta": {"qid": "a1", "text": "what is up?"}, "labels": {"gold": ["the sky"]}}]
    fields = {"question_field": "meta.text", "answers_field": "labels.gold", "id_field": "meta.qid"}
    response = upload(api(alice), jsonl(records), filename="own.jsonl", **fields)
    assert response.status_code == 201, response.json()
    assert (response.json()["detected_shape"], response.json()["ids_from"]) == ("mapping", "meta.qid")
    assert stored(data_storage) == [{"id": "a1", "question": "what is up?", "golden_answers": ["the sky"]}]


def test_a_mapped_field_that_is_wrong_is_named_by_its_path(alice, api):
    records = [{"meta": {"text": "what is up?"}, "labels": {"gold": []}}]
    response = upload(api(alice), jsonl(records), question_field="meta.text", answers_field="labels.gold")
    assert response.status_code == 400
    assert "line 1: field 'labels.gold' must be a non-empty list of strings" in response.json()["file"][0]


@pytest.mark.parametrize(
    "fields",
    [{"question_field": "a..b"}, {"answers_field": "x" * 300}, {"id_field": "__import__('os')"}, {"id_field": "a b"}],
)
def test_a_mapping_field_that_is_no_dotted_path_is_a_400(alice, api, fields):
    response = upload(api(alice), jsonl([{"q": "x"}]), **fields)
    assert response.status_code == 400 and set(response.json()) == set(fields), response.json()
    assert not Dataset.objects.exists()


@pytest.mark.parametrize(("filename", "content"), [("x.jsonl", jsonl([{"query": "x", "label": "y"}]))])
def test_an_unknown_shape_is_a_400_naming_its_keys_and_the_mapping_fields(alice, api, filename, content):
    response = upload(api(alice), content, filename=filename)
    assert response.status_code == 400
    message = response.json()["file"][0]
    assert "it has the keys label, query" in message
    assert all(name in message for name in ("question_field", "answers_field", "id_field"))
    assert not Dataset.objects.exists()


def test_a_verl_record_whose_ground_truth_is_missing_names_the_field(alice, api):
    records = [
        {"prompt": chat("q?"), "reward_model": {"ground_truth": ["a"]}},
        {"prompt": chat("r?"), "reward_model": "x"},
    ]
    response = upload(api(alice), jsonl(records))
    assert response.status_code == 400
    assert "line 2: field 'reward_model.ground_truth' must be a non-empty list" in response.json()["file"][0]
