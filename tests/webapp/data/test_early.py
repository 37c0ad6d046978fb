"""A big JSONL checked while its body arrives (`formats.EarlyCheck`, fed by the upload handler): the check after the
body adopts the lines done and reads on from there, so the stored file, its sha256 and counts, and every refusal
and the line it names are those of the check without it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.webapp.data.conftest import corpus, jsonl, questions, upload
from webapp.data import formats, uploads
from webapp.data.models import DatasetVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def adopted(monkeypatch):
    """Blocks of 4 kB, the check while the body arrives for any size; the lines each upload's check adopted."""
    monkeypatch.setattr(formats, "LINE_BLOCK", 4096)
    monkeypatch.setattr(formats, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(uploads, "EARLY_FROM_BYTES", 0)
    lines: list[int] = []
    adopt = formats.EarlyCheck.adopt

    def spy(self, *args):
        found = adopt(self, *args)
        lines.append(found[1].lines if found else 0)
        return found

    monkeypatch.setattr(formats.EarlyCheck, "adopt", spy)
    return lines


@pytest.mark.parametrize("kind", ["questions", "corpus"])
def test_a_file_checked_while_it_arrives_is_stored_as_the_check_after_it_stores_it(
    alice, api, adopted, monkeypatch, kind
):
    records = questions(2000) if kind == "questions" else corpus(2000)
    records[30] = {**records[30], "id": 30}  # an integer id, written as a string
    content = jsonl(records)
    folders = set(Path(tempfile.gettempdir()).glob("inspo-early-*"))
    early = upload(api(alice), content, name="early", kind=kind).json()
    assert adopted[-1] > 100, adopted  # lines checked while the body arrived
    monkeypatch.setattr(uploads, "EARLY_FROM_BYTES", 1 << 62)
    after = upload(api(alice), content, name="after", kind=kind).json()
    assert early["sha256"] == after["sha256"] and early["records"] == after["records"] == 2000
    assert early["lengths"] == after["lengths"]
    assert set(Path(tempfile.gettempdir()).glob("inspo-early-*")) == folders  # dropped once the request ended


BAD = [
    (30, {"id": "q30", "question": "q", "golden_answers": []}, "line 31: field 'golden_answers' must be a non-empty"),
    (1500, {"id": "q1", "question": "q", "golden_answers": ["a"]}, "line 1501: field 'id' repeats 'q1' of line 2"),
    (1500, {"id": "z", "question": "q", "golden_answers": ["a"], "x": 1}, None),  # another key: read a record at a time
]


@pytest.mark.parametrize(("at", "record", "message"), BAD)
def test_a_bad_record_is_named_as_before_wherever_the_early_check_stopped(alice, api, adopted, at, record, message):
    records = questions(2000)
    records[at] = record
    response = upload(api(alice), jsonl(records))
    if message is None:
        assert response.status_code == 201 and response.json()["records"] == 2000, response.json()
        return
    assert response.status_code == 400 and message in response.json()["file"][0], response.json()
    assert not DatasetVersion.objects.exists()


def test_what_the_early_check_guessed_wrong_is_checked_after_the_body(alice, api, adopted):
    refused = upload(api(alice), jsonl(corpus(500)), kind="questions")  # looked like a corpus
    assert refused.status_code == 400 and "line 1: a questions file needs" in refused.json()["file"][0]
    records = questions(500)
    mapped = upload(api(alice), jsonl(records), question_field="question", answers_field="golden_answers")
    assert mapped.status_code == 201 and mapped.json()["detected_shape"] == "flashrag+mapping"
    assert adopted == [0, 0]
