"""Reachability checks through the API and the Data page, on hand-made files whose answers are known: of the eight
test questions, the corpus states the answers of three in the passages their questions retrieve, two more only in
unrelated passages, and three nowhere (top 3: 3/8, anywhere: 5/8). A check waits for its corpus's index job, is
computed once per questions version × corpus version × method × k, and is seen and started only by the teams that
see both its datasets."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.webapp.data.conftest import upload
from webapp.data.indexing import INDEX_TASK
from webapp.data.models import IndexJob, ReachCheck
from webapp.data.reach import REACH_TASK
from workers.indexing import index_execute
from workers.reach import reach_execute
from workers.tasks import check_reach

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "engine" / "data" / "reach"
TARGET = {"questions": "data:mine", "split": "test", "corpus": "data:wiki", "method": "bm25", "k": 3}


@pytest.fixture
def alices_data(alice, api):
    client = api(alice)
    for name, kind, split, file in (
        ("mine", "questions", "test", "test.jsonl"),
        ("mine", "questions", "train", "train.jsonl"),
        ("wiki", "corpus", "", "corpus.jsonl"),
    ):
        response = upload(client, (FIXTURES / file).read_bytes(), filename=file, name=name, kind=kind, split=split)
        assert response.status_code == 201, response.json()
    return client


def start(client, capture, **fields):
    with capture(execute=True):
        return client.post("/api/v1/reach-checks/", {**TARGET, **fields}, format="json")


def test_a_check_waits_for_the_index_then_a_worker_finds_both_shares(
    alices_data, enqueued, django_capture_on_commit_callbacks
):
    started = start(alices_data, django_capture_on_commit_callbacks)
    assert started.status_code == 201, started.json()
    check = started.json()
    assert (check["status"], check["questions"], check["corpus"]) == ("waiting", "data:mine@1", "data:wiki@1")
    job = IndexJob.objects.get()
    assert enqueued == [(INDEX_TASK, [job.pk], "cpu")]  # the index first, as a run waits for it

    with django_capture_on_commit_callbacks(execute=True):
        assert index_execute(job_id=job.pk) == "done"
    assert enqueued[-1] == (REACH_TASK, [check["id"]], "cpu")
    assert check_reach.apply(args=[check["id"]]).get() == "done"  # the registered task, as a worker runs it

    done = alices_data.get(f"/api/v1/reach-checks/{check['id']}/").json()
    assert (done["status"], done["question_count"], done["reachable_topk"], done["reachable_anywhere"]) == (
        "done", 8, 3, 5,
    )  # fmt: skip
    assert (done["topk_share"], done["anywhere_share"], done["low"]) == (0.375, 0.625, False)
    assert (done["stage"], done["done"], done["total"]) == ("scan", 10, 10)
    assert {q["id"] for q in done["examples"]["nowhere"]} == {"q6", "q7", "q8"}
    assert {q["id"] for q in done["examples"]["beyond_topk"]} == {"q4", "q5"}

    again = start(alices_data, django_capture_on_commit_callbacks)
    assert (again.status_code, again.json()["id"]) == (200, check["id"])  # cached: nothing is sent
    assert len(enqueued) == 2
    looked_up = alices_data.get("/api/v1/reach-checks/", TARGET).json()
    assert [c["id"] for c in looked_up] == [check["id"]]

    one = start(alices_data, django_capture_on_commit_callbacks, k=1)  # another k is another check
    assert one.status_code == 201 and one.json()["status"] == "queued"  # the index is built: sent at once
    assert enqueued[-1] == (REACH_TASK, [one.json()["id"]], "cpu")
    resent = start(alices_data, django_capture_on_commit_callbacks, k=1)  # still queued: its message may be lost
    assert resent.status_code == 200 and enqueued[-2:] == [(REACH_TASK, [one.json()["id"]], "cpu")] * 2
    assert reach_execute(check_id=one.json()["id"]) == "done"
    assert ReachCheck.objects.get(pk=one.json()["id"]).reachable_topk <= 3


def test_a_check_of_the_training_split_is_not_the_test_splits(alices_data, django_capture_on_commit_callbacks):
    train = start(alices_data, django_capture_on_commit_callbacks, split="train").json()
    test = start(alices_data, django_capture_on_commit_callbacks).json()
    assert train["id"] != test["id"] and (train["split"], test["split"]) == ("train", "test")
    assert alices_data.get("/api/v1/reach-checks/", {**TARGET, "split": "dev"}).status_code == 400


def test_a_cancelled_check_stops_and_starts_again_when_asked(alices_data, django_capture_on_commit_callbacks):
    check = start(alices_data, django_capture_on_commit_callbacks).json()
    cancelled = alices_data.post(f"/api/v1/reach-checks/{check['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert reach_execute(check_id=check["id"]) == "skipped"
    assert alices_data.post(f"/api/v1/reach-checks/{check['id']}/cancel/").status_code == 409
    restarted = start(alices_data, django_capture_on_commit_callbacks)
    assert restarted.status_code == 201 and restarted.json()["id"] == check["id"]
    assert restarted.json()["status"] in ("waiting", "queued")


def test_another_team_neither_sees_nor_starts_checks_of_alices_data(
    alices_data, alice_team, bob, bob_team, api, client, tmp_path, django_capture_on_commit_callbacks
):
    check = start(alices_data, django_capture_on_commit_callbacks).json()
    bobs = api(bob)
    assert bobs.get(f"/api/v1/reach-checks/{check['id']}/").status_code == 404
    assert bobs.post(f"/api/v1/reach-checks/{check['id']}/cancel/").status_code == 404
    assert bobs.get("/api/v1/reach-checks/").json() == []
    refused = bobs.post("/api/v1/reach-checks/", TARGET, format="json")
    assert refused.status_code == 400 and "no dataset of that name" in str(refused.json()["questions"])
    foreign = bobs.post("/api/v1/reach-checks/", {**TARGET, "team": alice_team.slug}, format="json")
    assert foreign.status_code == 400 and "team" in foreign.json()
    assert ReachCheck.objects.count() == 1

    # shared questions checked against alice's corpus: bob sees the shared dataset, never alice's check of it
    shared = tmp_path / "data" / "shared" / "pop.jsonl"
    shared.parent.mkdir(parents=True)
    shared.write_bytes((FIXTURES / "test.jsonl").read_bytes())
    call_command("register_shared_data", str(shared), "--name", "popqa", "--kind", "questions", "--split", "test")
    hers = start(alices_data, django_capture_on_commit_callbacks, questions="data:popqa").json()
    assert hers["questions"] == "data:shared/popqa@1"
    dataset_id = hers["questions_dataset"]
    assert [c["id"] for c in alices_data.get(f"/api/v1/datasets/{dataset_id}/").json()["reach_checks"]] == [hers["id"]]
    assert bobs.get(f"/api/v1/datasets/{dataset_id}/").json()["reach_checks"] == []
    client.force_login(bob)
    page = client.get(f"/data/{dataset_id}/").content.decode()
    assert "data:wiki" not in page and "Not checked against any corpus yet" in page
    assert bobs.get(f"/api/v1/reach-checks/{hers['id']}/").status_code == 404


def test_a_viewer_reads_checks_but_cannot_start_one(alices_data, victor, api, django_capture_on_commit_callbacks):
    check = start(alices_data, django_capture_on_commit_callbacks).json()
    viewer = api(victor)
    assert viewer.get(f"/api/v1/reach-checks/{check['id']}/").status_code == 200
    assert viewer.post("/api/v1/reach-checks/", {**TARGET, "k": 5}, format="json").status_code == 403
    assert viewer.post(f"/api/v1/reach-checks/{check['id']}/cancel/").status_code == 403


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"k": 0}, "k"),
        ({"k": 101}, "k"),
        ({"k": "three"}, "k"),
        ({"method": "grep"}, "method"),
        ({"questions": "mine"}, "questions"),
        ({"questions": "data:wiki"}, "questions"),  # a corpus is no questions dataset
        ({"corpus": "data:mine"}, "corpus"),
        ({"corpus": "data:nothing"}, "corpus"),
        ({"split": "../train"}, "split"),
        ({"split": "dev"}, "questions"),
        ({"questions": "data:mine@9"}, "questions"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(alices_data, fields, field):
    response = alices_data.post("/api/v1/reach-checks/", {**TARGET, **fields}, format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_a_lookup_needs_both_datasets_and_says_when_none_was_started(alices_data):
    assert alices_data.get("/api/v1/reach-checks/", TARGET).json() == []
    half = alices_data.get("/api/v1/reach-checks/", {"questions": "data:mine"})
    assert half.status_code == 400 and "corpus" in half.json()


def test_the_data_page_starts_a_check_and_shows_both_shares(
    alice, alices_data, client, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    dataset_id = ReachCheck._meta.get_field("questions").related_model.objects.filter(split="test").get().dataset_id
    page = client.get(f"/data/{dataset_id}/").content.decode()
    assert 'data-testid="reach-form"' in page and '<option value="data:wiki">' in page
    with django_capture_on_commit_callbacks(execute=True):
        posted = client.post(
            f"/data/{dataset_id}/",
            {"action": "reach", "split": "test", "corpus": "data:wiki", "method": "bm25", "k": "3"},
        )
    assert posted.status_code == 302
    check = ReachCheck.objects.get()
    index_execute(job_id=IndexJob.objects.get().pk)
    assert reach_execute(check_id=check.pk) == "done"
    page = client.get(f"/data/{dataset_id}/").content.decode()
    assert "37.5 % (3 of 8)" in page and "62.5 % (5 of 8)" in page
    refused = client.post(f"/data/{dataset_id}/", {"action": "reach", "split": "test", "corpus": "data:wiki", "k": "0"})
    assert refused.status_code == 302 and ReachCheck.objects.count() == 1


def low_questions() -> bytes:
    """q1 (reached in the top 3) and q4-q8 (not): 1 of 6, below the 30 % the pages warn at."""
    lines = (FIXTURES / "test.jsonl").read_text().splitlines(keepends=True)
    return "".join(lines[:1] + lines[3:]).encode()


def test_the_run_page_offers_the_check_then_warns_beside_what_the_run_learnt(
    alice, alices_data, client, django_capture_on_commit_callbacks
):
    assert upload(alices_data, low_questions(), filename="low.jsonl", name="low").status_code == 201
    overrides = {"env.dataset": "data:low", "env.corpus": "data:wiki", "env.retriever": "bm25", "env.top_k": 3}
    created = alices_data.post(
        "/api/v1/runs/", {"name": "low", "preset": "quick", "overrides": overrides}, format="json"
    )
    assert created.status_code == 201, created.json()
    client.force_login(alice)
    page = client.get(f"/runs/{created.json()['id']}/").content.decode()
    assert 'data-testid="run-reach-start"' in page and "Not checked" in page
    assert 'name="questions" value="data:low@1"' in page and 'name="corpus" value="data:wiki@1"' in page

    form = {"action": "reach", "questions": "data:low@1", "split": "train", "corpus": "data:wiki@1", "k": "3"}
    dataset_id = ReachCheck._meta.get_field("questions").related_model.objects.get(dataset__name="low").dataset_id
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/data/{dataset_id}/", {**form, "method": "bm25"}).status_code == 302
    check = ReachCheck.objects.get()
    assert "is waiting" in client.get(f"/runs/{created.json()['id']}/").content.decode()
    index_execute(job_id=IndexJob.objects.get().pk)
    assert reach_execute(check_id=check.pk) == "done"
    page = client.get(f"/runs/{created.json()['id']}/").content.decode()
    assert "Only <strong>16.7 %</strong> of the training questions (1 of 6)" in page
    assert "<strong>50.0 %</strong> anywhere in data:wiki@1" in page


def test_the_new_run_form_carries_what_its_script_needs_to_name_a_check(alice, alice_team, client):
    client.force_login(alice)
    page = client.get("/runs/new/").content.decode()
    assert 'data-testid="reach-line"' in page
    states = json.loads(html.unescape(re.search(r'data-reach="([^"]*)"', page).group(1)))
    assert states["teams"] == {str(alice_team.pk): alice_team.slug} and states["low"] == 0.3
    assert states["presets"]["quick"]["top_k"] >= 1 and states["presets"]["quick"]["corpus"] == "builtin"
