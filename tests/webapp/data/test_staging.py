"""Upload, see, confirm: a previewed upload is checked in full and staged under its team with its first rows as they
will be read; it is kept only when confirmed, counts against the team's limit only while staged, and its file is
deleted when it is discarded, expires or is replaced; another team can neither see, confirm nor discard it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from tests.webapp.data.conftest import jsonl, parquet, questions
from webapp.data import staging
from webapp.data.models import Dataset, DatasetVersion, StagedUpload

pytestmark = pytest.mark.django_db


def preview(client, content: bytes, filename: str = "q.jsonl", **fields):
    data = {"name": "mine", "kind": "questions", **fields, "file": SimpleUploadedFile(filename, content)}
    return client.post("/api/v1/datasets/preview/", data, format="multipart")


def staged_files(settings) -> list[Path]:
    return sorted(p for p in (Path(settings.INSPO_DATA_DIR) / "staging").glob("*/*"))


def test_a_preview_shows_the_rows_as_read_and_keeps_nothing_until_confirmed(alice, api, settings, data_storage):
    client = api(alice)
    verl = [
        {
            "prompt": [{"role": "user", "content": f"Question: capital of country {i}?"}],
            "reward_model": {"ground_truth": f"City {i}"},
        }
        for i in range(12)
    ]
    response = preview(client, jsonl(verl), split="test")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["detected_shape"], body["ids_from"], body["records"], body["split"]) == (
        "verl",
        "line number",
        12,
        "test",
    )
    assert len(body["rows"]) == staging.PREVIEW_ROWS and body["existing"] is None
    assert body["rows"][1] == {"id": "2", "question": "capital of country 1?", "golden_answers": ["City 1"]}
    assert not Dataset.objects.exists() and not list(data_storage.rglob("*.jsonl"))
    assert len(staged_files(settings)) == 1
    assert client.get(f"/api/v1/datasets/staged/{body['id']}/").json()["rows"] == body["rows"]

    confirmed = client.post(f"/api/v1/datasets/staged/{body['id']}/confirm/")
    assert confirmed.status_code == 201, confirmed.json()
    version = DatasetVersion.objects.get()
    assert (version.split, version.records, version.sha256) == ("test", 12, body["sha256"])
    assert confirmed.json()["detected_shape"] == "verl" and confirmed.json()["dataset"]["reference"] == "data:mine"
    assert (data_storage / version.file).read_text().splitlines()[1] == (
        '{"id":"2","question":"capital of country 1?","golden_answers":["City 1"]}'
    )
    assert staged_files(settings) == [] and not StagedUpload.objects.exists()
    assert client.post(f"/api/v1/datasets/staged/{body['id']}/confirm/").status_code == 404  # once only
    again = preview(client, jsonl(verl), split="test").json()
    assert again["existing"] == {"reference": "data:mine", "number": 1, "dataset": version.dataset_id}
    assert client.post(f"/api/v1/datasets/staged/{again['id']}/confirm/").status_code == 200
    assert DatasetVersion.objects.count() == 1 and staged_files(settings) == []


def test_another_team_cannot_see_confirm_or_discard_a_staged_upload(alice, bob, api, settings):
    staged = preview(api(alice), jsonl(questions(3))).json()
    bobs = api(bob)
    url = f"/api/v1/datasets/staged/{staged['id']}/"
    assert bobs.get(url).status_code == 404
    assert bobs.post(f"{url}confirm/").status_code == 404
    assert bobs.delete(url).status_code == 404
    assert api(None).get(url).status_code in (401, 403)
    assert not Dataset.objects.exists() and len(staged_files(settings)) == 1
    assert api(alice).delete(url).status_code == 204
    assert staged_files(settings) == [] and api(alice).get(url).status_code == 404


def test_a_bad_file_is_the_uploads_400_and_leaves_no_file(alice, api, settings):
    bad = jsonl(questions(3)) + b'{"id": "x", "question": "?", "golden_answers": []}\n'
    response = preview(api(alice), bad)
    assert response.status_code == 400
    assert "line 4: field 'golden_answers' must be a non-empty list" in response.json()["file"][0]
    unknown = preview(api(alice), jsonl([{"q": "who?", "a": ["me"]}]))
    assert unknown.status_code == 400 and "question_field" in unknown.json()["file"][0]
    assert "the keys a, q" in unknown.json()["file"][0]
    assert preview(api(alice), b"", name="nl\n").status_code == 400
    assert staged_files(settings) == [] and not StagedUpload.objects.exists()
    mapped = preview(api(alice), jsonl([{"q": "who?", "a": ["me"]}]), question_field="q", answers_field="a")
    assert mapped.status_code == 201 and mapped.json()["detected_shape"] == "mapping"
    assert mapped.json()["rows"] == [{"id": "1", "question": "who?", "golden_answers": ["me"]}]


def test_staged_bytes_count_against_the_team_limit_only_while_staged(alice, api, settings):
    client = api(alice)
    first = preview(client, jsonl(questions(20))).json()
    settings.INSPO_DATA_TEAM_MAX_BYTES = first["size_bytes"] + 100
    refused = preview(client, jsonl(questions(20, prefix="r")))
    assert refused.status_code == 400 and "over its limit" in refused.json()["file"][0], refused.json()
    assert client.delete(f"/api/v1/datasets/staged/{first['id']}/").status_code == 204
    second = preview(client, jsonl(questions(20, prefix="r")))
    assert second.status_code == 201
    StagedUpload.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(f"/api/v1/datasets/staged/{second.json()['id']}/").status_code == 404
    assert staged_files(settings) == [] and not StagedUpload.objects.exists()  # expired: row and file deleted


def test_a_team_keeps_at_most_three_staged_uploads_and_stray_files_are_swept(alice, api, settings):
    client = api(alice)
    ids = [preview(client, jsonl(questions(2, prefix=f"s{i}"))).json()["id"] for i in range(4)]
    assert set(StagedUpload.objects.values_list("id", flat=True)) == {__import__("uuid").UUID(i) for i in ids[1:]}
    assert len(staged_files(settings)) == 3
    stray = staged_files(settings)[0].parent / "left-by-a-killed-request.jsonl"
    stray.write_text("{}\n")
    staging.staged_expire(now=timezone.now() + staging.STAGED_FOR + timedelta(minutes=1))
    assert staged_files(settings) == [] and not StagedUpload.objects.exists()


def test_parquet_previews_from_nested_structs_and_from_json_strings(alice, api):
    import json

    chat = [{"role": "user", "content": "Question: who wrote hamlet?"}]
    nested = parquet({"prompt": [chat], "reward_model": [{"ground_truth": {"target": ["Shakespeare"]}}]})
    strings = parquet({"prompt": [json.dumps(chat)], "reward_model": [json.dumps({"ground_truth": "Shakespeare"})]})
    for content in (nested, strings):
        response = preview(api(alice), content, filename="v.parquet")
        assert response.status_code == 201, response.json()
        assert response.json()["rows"] == [
            {"id": "1", "question": "who wrote hamlet?", "golden_answers": ["Shakespeare"]}
        ]


def test_the_page_without_its_script_previews_then_confirms(alice, client, settings):
    client.force_login(alice)
    page = client.get("/data/").content.decode()
    assert 'data-testid="mapping-fields"' in page and "question_field" in page
    refused = client.post(
        "/data/preview/",
        {
            "team": "alices",
            "name": "own",
            "kind": "questions",
            "file": SimpleUploadedFile("o.jsonl", jsonl([{"q": "who?", "a": "me"}])),
        },
    )
    assert refused.status_code == 400 and 'data-testid="mapping-fields" open' in refused.content.decode()
    response = client.post(
        "/data/preview/",
        {
            "team": "alices",
            "name": "own",
            "kind": "questions",
            "question_field": "q",
            "answers_field": "a",
            "file": SimpleUploadedFile("o.jsonl", jsonl([{"q": "who?", "a": "me"}])),
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    shown = client.get(response.url).content.decode()
    assert "who?" in shown and "read as <strong>mapping</strong>" in shown and not Dataset.objects.exists()
    kept = client.post(response.url, {"action": "confirm"})
    assert kept.status_code == 302 and DatasetVersion.objects.get().records == 1
    assert staged_files(settings) == []
