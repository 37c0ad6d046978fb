"""A checkpoint's download carries its population: the archive is the checkpoint as the engine wrote it —
inspo_state.json (population, lineage, replay buffer and progress at that step) and policy/ — with the optimizer
state only on request (`?optimizer=1`), and only while the engine keeps it (the newest checkpoint of a run that can
resume). The sizes and digests the API lists are those of what each download sends. Viewers download, other teams
get a 404."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from inspo_engine.checkpoints import (
    MERGED_DIR,
    OPTIMIZER_DIR,
    POLICY_DIR,
    checkpoint_path,
    complete_checkpoints,
    directory_bytes,
    drop_optimizer_state,
    write_checkpoint,
)
from inspo_engine.events import CheckpointSaved
from tests.factories import CheckpointFactory, RunFactory
from webapp.runs.archives import archive_digest, archive_files
from webapp.runs.models import Checkpoint
from webapp.runs.recorder import DatabaseSink

pytestmark = pytest.mark.django_db

WEIGHTS = bytes(range(256)) * 4_000
OPTIMIZER = b"\2" * 200_000


@pytest.fixture
def run(alice_team, settings, tmp_path):
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_ARCHIVE_DIR = tmp_path / "archives"
    return RunFactory(team=alice_team, status="running")


def out_dir(run):
    from webapp.runs.selectors import run_directory

    return run_directory(run_id=run.pk)


def save(run, step, *, optimizer=True, merged=False):
    """A checkpoint written as the engine writes one (weights, tokenizer, optimizer state, the loop's state with its
    population), the optimizer-state retention the engine runs, and its checkpoint_saved through the worker's sink."""

    def backend_save(directory: Path) -> None:
        (directory / POLICY_DIR).mkdir()
        (directory / POLICY_DIR / "model.safetensors").write_bytes(WEIGHTS + bytes([step]))
        (directory / POLICY_DIR / "config.json").write_text('{"layers": 2}')
        (directory / OPTIMIZER_DIR).mkdir()
        (directory / OPTIMIZER_DIR / "trainer_state.pt").write_bytes(OPTIMIZER)
        if merged:  # a LoRA run's last checkpoint: adapters in policy/, the merged policy beside them
            (directory / POLICY_DIR / "model.safetensors").unlink()
            (directory / POLICY_DIR / "adapter_model.safetensors").write_bytes(b"\3" * 1_000)
            (directory / MERGED_DIR).mkdir()
            (directory / MERGED_DIR / "config.json").write_text('{"layers": 2}')
            (directory / MERGED_DIR / "model.safetensors").write_bytes(WEIGHTS)

    state = {
        "schema_version": 1,
        "progress": {"step": step},
        "population": {"archive": [{"id": "ins-0000", "text": "the seed", "parent_id": None, "birth_step": 0}]},
    }
    directory = checkpoint_path(out_dir(run), step)
    size = write_checkpoint(directory, state, backend_save, optimizer_state=optimizer)
    drop_optimizer_state(out_dir(run), keep=1 if optimizer else 0)
    sink = DatabaseSink(run.pk)
    sink.emit(
        CheckpointSaved(
            step=step,
            path=str(directory),
            bytes=size,
            optimizer_bytes=directory_bytes(directory / OPTIMIZER_DIR),
            disk_bytes=sum(directory_bytes(p) for p in complete_checkpoints(out_dir(run))),
        )
    )
    return Checkpoint.objects.get(run=run, step=step)


def download(client, checkpoint, **params):
    return client.get(f"/api/v1/runs/{checkpoint.run_id}/checkpoints/{checkpoint.pk}/archive/", params)


def body(response):
    return b"".join(response.streaming_content)


def test_the_archive_holds_the_population_and_the_policy_as_on_disk_and_its_listed_size(alice, api, run):
    checkpoint = save(run, 2)
    response = download(api(alice), checkpoint)
    data = body(response)
    assert response.status_code == 200
    assert len(data) == int(response["Content-Length"]) == checkpoint.archive_bytes
    assert hashlib.sha256(data).hexdigest() == checkpoint.sha256 and response["ETag"] == f'"{checkpoint.sha256}"'
    names = ["step-000002/inspo_state.json", "step-000002/policy/config.json", "step-000002/policy/model.safetensors"]
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames() == names
        state = json.loads(archive.extractfile("step-000002/inspo_state.json").read())
    assert state["progress"]["step"] == 2 and state["population"]["archive"][0]["id"] == "ins-0000"
    assert [f["name"] for f in checkpoint.files] == names
    listed = api(alice).get(f"/api/v1/runs/{run.pk}/checkpoints/").json()[0]
    assert listed["archive_bytes"] == len(data) < listed["bytes"], "the size shown is what is sent, not the directory"


def test_the_optimizer_state_comes_only_on_request_and_with_its_own_size_and_digest(alice, api, run):
    checkpoint = save(run, 2)
    assert checkpoint.optimizer_available and checkpoint.optimizer_bytes == len(OPTIMIZER)
    response = download(api(alice), checkpoint, optimizer="1")
    data = body(response)
    assert response.status_code == 200 and len(data) == checkpoint.optimizer_archive_bytes
    assert hashlib.sha256(data).hexdigest() == checkpoint.optimizer_sha256 != checkpoint.sha256
    assert response["ETag"] == f'"{checkpoint.optimizer_sha256}"'
    assert response["Content-Disposition"].endswith(f'{run.pk}-step-000002-with-optimizer.tar"')
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames()[-1] == "step-000002/training/trainer_state.pt"
        assert archive.extractfile("step-000002/training/trainer_state.pt").read() == OPTIMIZER
    plain = body(download(api(alice), checkpoint, optimizer="false"))
    assert data.startswith(plain[: -2 * tarfile.BLOCKSIZE]), "the larger archive is the plain one plus training/"


def test_only_the_newest_checkpoint_keeps_the_optimizer_state_and_an_older_ones_is_gone(alice, api, run):
    older = save(run, 2)
    newer = save(run, 4)
    older.refresh_from_db()
    assert not older.optimizer_available and newer.optimizer_available
    assert newer.disk_bytes == directory_bytes(out_dir(run) / "checkpoints")
    gone = download(api(alice), older, optimizer="1")
    assert gone.status_code == 410 and "keeps no optimizer state" in gone.json()["detail"]
    assert download(api(alice), older).status_code == 200, "its policy and population still download"
    finished = save(run, 6, optimizer=False)
    newer.refresh_from_db()
    assert not newer.optimizer_available and not finished.optimizer_available and finished.optimizer_sha256 == ""
    assert download(api(alice), finished, optimizer="1").status_code == 410


def test_a_bad_flag_is_a_400_that_names_it(alice, api, run):
    checkpoint = save(run, 2)
    for value in ("maybe", ["1", "0"]):
        response = download(api(alice), checkpoint, optimizer=value)
        assert response.status_code == 400 and "optimizer" in response.json()


def test_a_checkpoint_stored_before_archives_carried_the_population_sends_what_its_digest_names(alice, api, run):
    directory = checkpoint_path(out_dir(run), 8)
    (directory / POLICY_DIR).mkdir(parents=True)
    (directory / POLICY_DIR / "config.json").write_text("{}")
    (directory / "inspo_state.json").write_text("{}")
    digest = archive_digest(archive_files(directory / POLICY_DIR, directory.name, root=out_dir(run)))
    legacy = CheckpointFactory(
        run=run, step=8, path=str(directory), layout=1, sha256=digest.sha256, archive_bytes=digest.size
    )
    response = download(api(alice), legacy)
    assert response.status_code == 200 and hashlib.sha256(body(response)).hexdigest() == digest.sha256


def test_viewers_download_and_other_teams_do_not_see_the_checkpoint(alice, victor, bob, api, run):
    checkpoint = save(run, 2)
    assert download(api(victor), checkpoint, optimizer="1").status_code == 200
    for params in ({}, {"optimizer": "1"}):
        response = download(api(bob), checkpoint, **params)
        assert response.status_code == 404 and b"WEIGHTS" not in response.content
    assert api(bob).get(f"/api/v1/runs/{run.pk}/checkpoints/").status_code == 404
    assert download(api(None), checkpoint).status_code in (401, 403)


def test_a_lora_runs_last_checkpoint_sends_its_merged_policy_as_policy_on_request(alice, api, run):
    checkpoint = save(run, 4, merged=True)
    assert checkpoint.merged_sha256 and checkpoint.merged_archive_bytes
    response = download(api(alice), checkpoint, policy="merged")
    data = body(response)
    assert response.status_code == 200 and len(data) == checkpoint.merged_archive_bytes
    assert hashlib.sha256(data).hexdigest() == checkpoint.merged_sha256 != checkpoint.sha256
    assert response["ETag"] == f'"{checkpoint.merged_sha256}"'
    assert response["Content-Disposition"].endswith(f'{run.pk}-step-000004-merged.tar"')
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = archive.getnames()
        assert archive.extractfile("step-000004/policy/model.safetensors").read() == WEIGHTS
    assert names == [
        "step-000004/inspo_state.json",
        "step-000004/policy/config.json",
        "step-000004/policy/model.safetensors",
    ]
    with tarfile.open(fileobj=io.BytesIO(body(download(api(alice), checkpoint)))) as archive:
        assert "step-000004/policy/adapter_model.safetensors" in archive.getnames()  # the default: the adapters
    listed = api(alice).get(f"/api/v1/runs/{run.pk}/checkpoints/").json()[0]
    assert listed["merged_sha256"] == checkpoint.merged_sha256


def test_a_checkpoint_without_a_merged_policy_is_a_410_that_says_why(alice, api, run):
    checkpoint = save(run, 2)
    assert checkpoint.merged_sha256 == ""
    response = download(api(alice), checkpoint, policy="merged")
    assert response.status_code == 410
    assert "no merged policy" in response.json()["detail"]


def test_merged_with_the_optimizer_state_or_an_unknown_policy_is_a_400_naming_the_field(alice, api, run):
    checkpoint = save(run, 4, merged=True)
    both = download(api(alice), checkpoint, policy="merged", optimizer="1")
    assert both.status_code == 400 and "policy" in both.json()
    unknown = download(api(alice), checkpoint, policy="../merged")
    assert unknown.status_code == 400 and "unknown policy" in json.dumps(unknown.json())


def test_other_teams_do_not_see_a_merged_policy(bob, api, run):
    checkpoint = save(run, 4, merged=True)
    assert download(api(bob), checkpoint, policy="merged").status_code == 404
