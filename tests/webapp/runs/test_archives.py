"""Checkpoint archives hold only the run's own files: a `policy/` that is itself a link out of the run's directory,
or a link inside it that leads out, refuses the download (a JSON 409) instead of streaming someone else's files."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.factories import CheckpointFactory, RunFactory
from webapp.runs.archives import ArchiveRefused, archive_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpoint(alice_team, settings, tmp_path):
    """A checkpoint of alice's run whose policy/ directory the test fills in."""
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
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
        assert archive.getnames() == ["step-000002/config.json"]


def checkpoint_dir(checkpoint):
    from pathlib import Path

    return Path(checkpoint.path)
