"""The operator's registration of a big file: streamed under no upload or team limit, with progress reports, and
resumable: a run interrupted part way and run again ends with the same canonical file and sha256 as one run that was
never interrupted; a bad line is still named."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.webapp.data.conftest import corpus, jsonl, questions
from webapp.core.errors import InvalidInput
from webapp.data import formats
from webapp.data.formats import Limits, check_upload
from webapp.data.models import DatasetVersion
from webapp.data.registering import Report
from webapp.data.services import shared_register

pytestmark = pytest.mark.django_db


class Interrupted(Exception):
    pass


@pytest.fixture
def small_blocks(monkeypatch):
    """4 kB blocks, so a small file is read in many and can be interrupted between them."""
    monkeypatch.setattr(formats, "LINE_BLOCK", 4096)


def shared_file(settings, name: str, content: bytes) -> Path:
    path = Path(settings.INSPO_SHARED_DATA_DIR) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def canonical(path: Path, kind: str, tmp_path: Path) -> bytes:
    """The canonical file of one uninterrupted check."""
    workdir = tmp_path / "once"
    workdir.mkdir()
    with gzip.open(path) if path.name.endswith(".gz") else path.open("rb") as handle:
        checked = check_upload(handle, filename="f.jsonl", kind=kind, limits=Limits(), workdir=workdir)  # type: ignore[arg-type]
    content = checked.path.read_bytes()
    shutil.rmtree(workdir)
    return content


@pytest.mark.parametrize("name", ["wiki.jsonl", "wiki.jsonl.gz"])
def test_an_interrupted_registration_goes_on_to_the_file_of_one_uninterrupted_run(
    settings, tmp_path, data_storage, small_blocks, name
):
    content = jsonl(corpus(3000))
    path = shared_file(settings, name, gzip.compress(content) if name.endswith(".gz") else content)
    reports: list[Report] = []

    def interrupt(report: Report) -> None:
        reports.append(report)
        if len(reports) == 8:
            raise Interrupted

    with pytest.raises(Interrupted):
        shared_register(path=path, name="wiki", kind="corpus", progress=interrupt, every=0)
    assert not DatasetVersion.objects.exists()
    stopped_at = reports[-1].done
    assert 0 < stopped_at < path.stat().st_size
    again: list[Report] = []
    done = shared_register(path=path, name="wiki", kind="corpus", progress=again.append, every=0)
    assert 0 < again[0].resumed_from <= stopped_at  # it went on from there, not from the start
    assert again[-1].done == path.stat().st_size
    expected = canonical(path, "corpus", tmp_path)
    assert done.version.sha256 == hashlib.sha256(expected).hexdigest() and done.version.records == 3000
    assert (data_storage / done.version.file).read_bytes() == expected
    assert not (Path(settings.INSPO_DATA_DIR) / "registering").exists() or not any(
        (Path(settings.INSPO_DATA_DIR) / "registering").iterdir()
    )


def test_a_changed_file_is_checked_from_its_start(settings, tmp_path, small_blocks):
    path = shared_file(settings, "nq.jsonl", jsonl(questions(1500)))
    calls: list[Report] = []

    def interrupt(report: Report) -> None:
        calls.append(report)
        if len(calls) == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        shared_register(path=path, name="nq", kind="questions", progress=interrupt, every=0)
    path.write_bytes(jsonl(questions(1600, prefix="n")))
    reports: list[Report] = []
    done = shared_register(path=path, name="nq", kind="questions", progress=reports.append, every=0)
    assert reports[0].resumed_from == 0 and done.version.records == 1600
    assert done.version.sha256 == hashlib.sha256(canonical(path, "questions", tmp_path)).hexdigest()


def test_a_bad_line_after_a_resume_is_named_and_nothing_is_kept(settings, small_blocks):
    good = jsonl(questions(1000))
    path = shared_file(settings, "bad.jsonl", good + b'{"id": "z", "question": "q", "golden_answers": []}\n')
    calls: list[Report] = []

    def interrupt(report: Report) -> None:
        calls.append(report)
        if len(calls) == 4:
            raise Interrupted

    with pytest.raises(Interrupted):
        shared_register(path=path, name="bad", kind="questions", progress=interrupt, every=0)
    with pytest.raises(InvalidInput, match="line 1001: field 'golden_answers' must be a non-empty list"):
        shared_register(path=path, name="bad", kind="questions", every=0)
    assert not any((Path(settings.INSPO_DATA_DIR) / "registering").iterdir())
    with pytest.raises(CommandError, match=r"bad\.jsonl: line 1001: field 'golden_answers'"):
        call_command("register_shared_data", str(path), "--name", "bad", "--kind", "questions")


def test_the_command_is_under_no_upload_or_team_limit_and_prints_progress(settings, small_blocks, capsys):
    settings.INSPO_DATA_MAX_UPLOAD_BYTES = 1000
    settings.INSPO_DATA_TEAM_MAX_BYTES = 1000
    path = shared_file(settings, "wiki.jsonl", jsonl(corpus(2000)))
    call_command("register_shared_data", str(path), "--name", "wiki", "--kind", "corpus", "--progress-every", "0")
    out = capsys.readouterr().out
    assert "wiki.jsonl: " in out and " MB/s, ETA " in out and "(100.0%)" in out
    assert "data:wiki version 1 (corpus, 2000 records" in out
    assert DatasetVersion.objects.get().size_bytes > 1000
