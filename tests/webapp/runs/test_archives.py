"""Checkpoint archives hold only the run's own files: a `policy/` that is itself a link out of the run's directory,
or a link inside it that leads out, refuses the download (a JSON 409) instead of streaming someone else's files.
An archive is built once, on its first download, and then sent as a file: by the proxy in front (X-Accel-Redirect,
X-Sendfile) so no web thread is held while it goes out, or by Django with Range support."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from tests.factories import CheckpointFactory, RunFactory
from webapp.runs import archives
from webapp.runs.archives import ArchiveRefused, archive_digest, archive_evict, archive_files, checkpoint_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpoint(alice_team, settings, tmp_path):
    """A checkpoint of alice's run whose policy/ directory the test fills in."""
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_ARCHIVE_DIR = tmp_path / "archives"
    run = RunFactory(team=alice_team, status="finished")
    path = tmp_path / "runs" / str(run.pk) / "checkpoints" / "step-000002"
    path.mkdir(parents=True)
    return CheckpointFactory(run=run, path=str(path), sha256="")


@pytest.fixture
def elsewhere(tmp_path):
    """Another run's weights, outside this run's directory."""
    other = tmp_path / "runs" / "another-teams-run" / "policy"
    other.mkdir(parents=True)
    (other / "model.safetensors").write_bytes(b"bob's weights")
    return other


def download(client, checkpoint):
    return client.get(f"/api/v1/runs/{checkpoint.run.pk}/checkpoints/{checkpoint.pk}/archive/")


def test_a_policy_directory_that_links_out_of_the_run_is_refused(alice, api, checkpoint, elsewhere):
    (checkpoint_dir(checkpoint) / "policy").symlink_to(elsewhere, target_is_directory=True)
    response = download(api(alice), checkpoint)
    assert response.status_code == 409 and "outside its run's directory" in response.json()["detail"]
    assert b"bob's weights" not in response.content


def test_a_link_inside_the_policy_that_leads_out_refuses_the_archive(alice, api, checkpoint, elsewhere):
    policy = checkpoint_dir(checkpoint) / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    (policy / "weights.safetensors").symlink_to(elsewhere / "model.safetensors")
    response = download(api(alice), checkpoint)
    assert response.status_code == 409 and "weights.safetensors" in response.json()["detail"]
    (policy / "weights.safetensors").unlink()
    (policy / "nested").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ArchiveRefused):
        archive_files(policy, "step-000002", root=checkpoint_dir(checkpoint).parents[1])


def test_links_that_stay_inside_the_run_are_left_out_and_the_rest_downloads(alice, api, checkpoint):
    policy = checkpoint_dir(checkpoint) / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    (policy / "alias.json").symlink_to(policy / "config.json")
    response = download(api(alice), checkpoint)
    assert response.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
        assert archive.getnames() == ["step-000002/policy/config.json"]


def checkpoint_dir(checkpoint):
    from pathlib import Path

    return Path(checkpoint.path)


@pytest.fixture
def hashed(checkpoint):
    """The checkpoint with 3 MB of weights and a config, hashed as the worker hashes it when it is saved."""
    policy = checkpoint_dir(checkpoint) / "policy"
    policy.mkdir()
    (policy / "config.json").write_text('{"layers": 2}')
    (policy / "model.safetensors").write_bytes(bytes(range(256)) * 12_000)
    digest = archive_digest(checkpoint_files(checkpoint_dir(checkpoint), root=checkpoint_dir(checkpoint).parents[1]))
    checkpoint.sha256, checkpoint.archive_bytes = digest.sha256, digest.size
    checkpoint.save()
    return checkpoint


def body(response):
    return b"".join(response.streaming_content)


def test_the_first_download_builds_the_archive_once_and_every_one_sends_that_file(alice, api, hashed, monkeypatch):
    writes = []
    real_write = archives.archive_write
    monkeypatch.setattr(archives, "archive_write", lambda *a, **k: writes.append(a) or real_write(*a, **k))
    client = api(alice)
    first, second = download(client, hashed), download(client, hashed)
    assert first.status_code == second.status_code == 200 and len(writes) == 1
    content = body(first)
    assert content == body(second) and hashlib.sha256(content).hexdigest() == hashed.sha256
    assert int(first["Content-Length"]) == len(content) == hashed.archive_bytes
    assert first["Accept-Ranges"] == "bytes" and first["ETag"] == f'"{hashed.sha256}"'
    built = list((Path(archives.settings.INSPO_ARCHIVE_DIR) / str(hashed.run.pk)).glob("*.tar"))
    assert [p.read_bytes() for p in built] == [content]


def test_a_range_request_resumes_a_download(alice, api, hashed):
    client = api(alice)
    whole = body(download(client, hashed))
    url = f"/api/v1/runs/{hashed.run.pk}/checkpoints/{hashed.pk}/archive/"
    part = client.get(url, HTTP_RANGE="bytes=1000-2999", HTTP_IF_RANGE=f'"{hashed.sha256}"')
    assert part.status_code == 206 and part["Content-Range"] == f"bytes 1000-2999/{len(whole)}"
    assert body(part) == whole[1000:3000] and part["Content-Length"] == "2000"
    tail = client.get(url, HTTP_RANGE="bytes=-512")
    assert tail.status_code == 206 and body(tail) == whole[-512:]
    assert client.get(url, HTTP_RANGE=f"bytes={len(whole)}-").status_code == 416
    other_version = client.get(url, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE='"another-version"')
    assert other_version.status_code == 200 and body(other_version) == whole


@pytest.mark.parametrize("serve", ["x-accel-redirect", "x-sendfile"])
def test_behind_a_proxy_the_app_names_the_file_and_sends_no_bytes(alice, api, hashed, settings, serve):
    settings.INSPO_ARCHIVE_SERVE = serve
    response = download(api(alice), hashed)
    assert response.status_code == 200 and response.content == b""
    assert response["Content-Type"] == "application/x-tar"
    assert response["Content-Disposition"] == f'attachment; filename="{hashed.run.pk}-step-000002.tar"'
    root = Path(settings.INSPO_ARCHIVE_DIR)
    if serve == "x-accel-redirect":
        relative = response["X-Accel-Redirect"].removeprefix(settings.INSPO_ARCHIVE_ACCEL_PREFIX)
        path = root / relative
    else:
        path = Path(response["X-Sendfile"])
    assert path.is_relative_to(root) and hashlib.sha256(path.read_bytes()).hexdigest() == hashed.sha256
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # the proxy's own user reads it


def test_files_changed_since_they_were_hashed_are_refused_and_nothing_is_kept(alice, api, hashed, settings):
    (checkpoint_dir(hashed) / "policy" / "config.json").write_text('{"layers": 3}')
    response = download(api(alice), hashed)
    assert response.status_code == 409 and "changed since it was saved" in response.json()["detail"]
    assert not list(Path(settings.INSPO_ARCHIVE_DIR).rglob("*.tar"))
    assert not list(Path(settings.INSPO_ARCHIVE_DIR).rglob(".building-*"))


def test_old_archives_make_room_for_a_new_one(tmp_path):
    for age, name in enumerate(("a", "b", "c")):
        path = tmp_path / "run" / f"{name}.tar"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 100)
        os.utime(path, (1_000 + age, 1_000 + age))
    assert archive_evict(tmp_path, room_for=150, max_bytes=300) == 2
    assert [p.name for p in (tmp_path / "run").glob("*.tar")] == ["c.tar"]
    assert archive_evict(tmp_path, room_for=10**9, max_bytes=0) == 0
