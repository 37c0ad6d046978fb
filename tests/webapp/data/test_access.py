"""Who sees and changes data: a team's members upload, index and delete; viewers read; another team gets a 404 on
every endpoint and page; shared data is read-only to every team; a dataset a run uses cannot be deleted. The Data
page lists, previews, plots lengths and uploads without a script too."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.webapp.data.conftest import corpus, jsonl, questions, upload
from webapp.data.models import Dataset, DatasetVersion, IndexJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def mine(alice, api):
    return upload(api(alice), jsonl(questions(8)), split="test").json()["dataset"]


@pytest.fixture
def wiki(alice, api):
    return upload(api(alice), jsonl(corpus(6)), filename="w.jsonl", name="wiki", kind="corpus").json()["dataset"]


def test_bob_gets_404_for_alices_dataset_on_every_endpoint_and_page(bob, api, client, mine, wiki):
    bobs = api(bob)
    assert bobs.get("/api/v1/datasets/").json() == []
    for url in (f"/api/v1/datasets/{mine['id']}/",):
        assert bobs.get(url).status_code == 404 and bobs.delete(url).status_code == 404
    assert bobs.post(f"/api/v1/datasets/{wiki['id']}/index/", {"method": "bm25"}, format="json").status_code == 404
    job = IndexJob.objects.create(version=DatasetVersion.objects.get(split="corpus"), sha256="x", method="bm25")
    assert bobs.get(f"/api/v1/index-jobs/{job.pk}/").status_code == 404
    assert bobs.post(f"/api/v1/index-jobs/{job.pk}/cancel/").status_code == 404
    client.force_login(bob)
    assert client.get(f"/data/{mine['id']}/").status_code == 404
    assert client.post(f"/data/{mine['id']}/", {"action": "delete"}).status_code == 404
    assert "data:mine" not in client.get("/data/").content.decode()
    assert Dataset.objects.count() == 2


def test_a_viewer_reads_but_cannot_upload_index_or_delete(victor, api, client, mine, wiki):
    viewer = api(victor)
    assert [d["name"] for d in viewer.get("/api/v1/datasets/").json()] == ["mine", "wiki"]
    assert viewer.get(f"/api/v1/datasets/{mine['id']}/").json()["preview"][0]["id"] == "q0"
    assert upload(viewer, jsonl(questions(2)), name="v").status_code == 403
    assert viewer.delete(f"/api/v1/datasets/{mine['id']}/").status_code == 403
    assert viewer.post(f"/api/v1/datasets/{wiki['id']}/index/", {}, format="json").status_code == 403
    client.force_login(victor)
    page = client.get("/data/").content.decode()
    assert "data:mine" in page and 'data-testid="upload-form"' not in page
    assert 'data-testid="delete-dataset"' not in client.get(f"/data/{mine['id']}/").content.decode()
    assert Dataset.objects.count() == 2


def test_a_dataset_a_run_uses_cannot_be_deleted_and_one_no_run_uses_can(alice, api, mine, data_storage):
    client = api(alice)
    overrides = {"env.dataset": "builtin", "eval.benchmarks": ["data:mine"]}
    run = client.post("/api/v1/runs/", {"name": "uses", "preset": "smoke", "overrides": overrides}, format="json")
    assert run.status_code == 201, run.json()
    refused = client.delete(f"/api/v1/datasets/{mine['id']}/")
    assert refused.status_code == 409 and "is used by 1 run(s): uses" in refused.json()["detail"]
    other = upload(client, jsonl(questions(3, prefix="o")), name="other").json()["dataset"]
    assert client.delete(f"/api/v1/datasets/{other['id']}/").status_code == 204
    assert not Dataset.objects.filter(name="other").exists()
    assert len([p for p in data_storage.rglob("*.jsonl")]) == 1  # its file is gone, mine's stays


def test_shared_data_is_read_only_to_every_team(alice, bob, api, tmp_path):
    from django.core.management import call_command

    shared = tmp_path / "data" / "shared" / "pop.jsonl"
    shared.parent.mkdir(parents=True)
    shared.write_bytes(jsonl(questions(4)))
    call_command("register_shared_data", str(shared), "--name", "popqa", "--kind", "questions", "--split", "test")
    dataset = Dataset.objects.get(name="popqa")
    for user in (alice, bob):
        listed = api(user).get("/api/v1/datasets/").json()
        assert [d["reference"] for d in listed if d["shared"]] == ["data:shared/popqa"]
        response = api(user).delete(f"/api/v1/datasets/{dataset.pk}/")
        assert response.status_code == 400 and "operator's" in response.json()["dataset"][0]


def test_the_detail_shows_splits_versions_preview_lengths_and_runs(alice, api, mine):
    body = api(alice).get(f"/api/v1/datasets/{mine['id']}/").json()
    assert body["splits"] == {"test": 8} and [v["number"] for v in body["versions"]] == [1]
    assert len(body["preview"]) == 8 and body["lengths"]["test"]["≤2"] == 8 and body["runs"] == []


def test_the_data_page_uploads_without_a_script_and_shows_the_dataset(alice, client, alice_team):
    client.force_login(alice)
    file = SimpleUploadedFile("qs.jsonl", jsonl(questions(25)))
    response = client.post("/data/", {"team": alice_team.slug, "name": "page", "kind": "questions", "file": file})
    assert response.status_code == 302, response.content.decode()[-2000:]
    page = client.get(response["Location"]).content.decode()
    assert "data:page" in page and "What is the capital of country 19?" in page
    assert "What is the capital of country 20?" not in page  # the preview holds 20 rows
    assert 'class="histogram-bar" style="width: 100%"' in page
    bad = SimpleUploadedFile("qs.jsonl", jsonl(questions(2)) + b'{"id": "x"}\n')
    refused = client.post("/data/", {"team": alice_team.slug, "name": "bad", "kind": "questions", "file": bad})
    assert refused.status_code == 400 and "line 3: field &#x27;question&#x27;" in refused.content.decode()


def test_an_index_jobs_progress_shows_done_rate_and_time_left(alice, api, client, wiki):
    version = DatasetVersion.objects.get(split="corpus")
    job = IndexJob.objects.create(
        version=version, sha256=version.sha256, method="bm25", status="running", passages_done=2500,
        passages_total=10_000, rate=500.0,
    )  # fmt: skip
    body = api(alice).get(f"/api/v1/index-jobs/{job.pk}/").json()
    assert (body["passages_done"], body["passages_total"], body["rate"], body["eta_s"]) == (2500, 10_000, 500.0, 15.0)
    client.force_login(alice)
    page = client.get(f"/data/{wiki['id']}/").content.decode()
    assert "2500 / 10000" in page and "500/s, 15 s left" in page


def test_a_dataset_whose_file_is_missing_says_so_and_the_same_upload_restores_it(
    alice, api, client, mine, data_storage
):
    version = DatasetVersion.objects.get()
    (data_storage / version.file).unlink()
    response = api(alice).get(f"/api/v1/datasets/{mine['id']}/")
    assert response.status_code == 200, response.content
    assert response.json()["files_missing"] == [1] and response.json()["preview"] == []
    client.force_login(alice)
    page = client.get(f"/data/{mine['id']}/")
    assert page.status_code == 200 and 'data-testid="files-missing"' in page.content.decode()
    assert "version 1 (test)" in page.content.decode()
    again = upload(api(alice), jsonl(questions(8)), split="test")
    assert again.status_code == 200 and (data_storage / version.file).is_file()
    assert api(alice).get(f"/api/v1/datasets/{mine['id']}/").json()["files_missing"] == []


@pytest.fixture
def finished_run(alice, alice_team):
    from tests.factories import CheckpointFactory, InstructionFactory, RunFactory
    from webapp.runs.models import Run

    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, step=4)
    InstructionFactory(run=run, key="ins-0")
    CheckpointFactory(run=run, step=2)
    return run


def test_a_dataset_a_queued_evaluation_names_cannot_be_deleted_until_it_ends(alice, api, mine, finished_run):
    from webapp.runs.models import EvaluationRequest

    client = api(alice)
    body = {"benchmarks": ["data:mine"], "checkpoint": finished_run.checkpoints.get().pk}
    assert client.post(f"/api/v1/runs/{finished_run.pk}/evaluate/", body, format="json").status_code == 202
    for status in ("queued", "running"):
        EvaluationRequest.objects.update(status=status)
        refused = client.delete(f"/api/v1/datasets/{mine['id']}/")
        assert refused.status_code == 409, refused.content
        assert f"evaluation {EvaluationRequest.objects.get().pk} of run {finished_run.name}" in refused.json()["detail"]
    EvaluationRequest.objects.update(status="finished")
    assert client.delete(f"/api/v1/datasets/{mine['id']}/").status_code == 204


def test_a_dataset_a_queued_heatmap_names_cannot_be_deleted(alice, api, mine, finished_run):
    from webapp.runs.models import Heatmap

    client = api(alice)
    body = {"instructions": ["ins-0"], "steps": [2], "benchmark": "data:mine", "sample_size": 4}
    response = client.post(f"/api/v1/runs/{finished_run.pk}/heatmaps/", body, format="json")
    assert response.status_code == 202, response.json()
    refused = client.delete(f"/api/v1/datasets/{mine['id']}/")
    assert refused.status_code == 409 and f"heatmap {Heatmap.objects.get().pk}" in refused.json()["detail"]
    Heatmap.objects.update(status="failed")
    assert client.delete(f"/api/v1/datasets/{mine['id']}/").status_code == 204


def test_a_pinned_version_keeps_naming_the_same_bytes_after_a_delete_and_a_new_upload(alice, api, mine):
    from webapp.data.references import data_snapshot

    client = api(alice)
    team = alice.memberships.get().team
    pinned = data_snapshot("data:mine@1", team=team, field="f", kind="questions").versions[0].sha256
    assert client.delete(f"/api/v1/datasets/{mine['id']}/").status_code == 204
    again = upload(client, jsonl(questions(3, prefix="new")), split="test")
    assert again.status_code == 201 and again.json()["number"] == 2  # number 1 is never given to other bytes
    refused = client.post(
        "/api/v1/runs/",
        {"name": "r", "preset": "smoke", "overrides": {"eval.benchmarks": ["data:mine@1"]}},
        format="json",
    )
    assert refused.status_code == 400
    assert "has versions 2 to 2 (those before 2 were deleted)" in refused.json()["config"]["eval.benchmarks"][0]
    assert data_snapshot("data:mine", team=team, field="f", kind="questions").versions[0].sha256 != pinned
