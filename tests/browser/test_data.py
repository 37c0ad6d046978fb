"""Bringing one's own data in a real browser, against a live server and a real Celery worker: upload a questions
file (train, then its test split), a corpus and a benchmark from the Data page (its progress bar, the first rows as
they will be read, confirm, then the dataset's page with its preview; a file of the team's own shape is refused
naming its keys, opens the mapping fields and is read through them); start a quick-shaped run from the New run
form that trains on them (the form's dropdowns offer them) and is evaluated on the uploaded benchmark and builtin;
the worker builds the corpus's index, trains the tiny model, and the run page's Table 1 fills with two columns and
their average."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.celery_worker import start_worker, wait_until_done
from webapp.data.models import IndexJob
from webapp.runs import tasks as run_tasks
from webapp.runs.models import Run

browser = e2e.browser

COUNTRIES = ["Peru", "Chile", "Kenya", "Norway", "Japan", "Egypt", "Canada", "Brazil"]
CAPITALS = ["Lima", "Santiago", "Nairobi", "Oslo", "Tokyo", "Cairo", "Ottawa", "Brasilia"]


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def qa(indices: range, prefix: str) -> list[dict[str, object]]:
    return [
        {"id": f"{prefix}{i}", "question": f"What is the capital of {COUNTRIES[i]}?", "golden_answers": [CAPITALS[i]]}
        for i in indices
    ]


def upload(page, file: Path, name: str, kind: str, split: str = "") -> str:
    """Upload, see the first rows as they will be read, confirm; the rows and shape as the page showed them."""
    page.get_by_role("link", name="Data", exact=True).click()
    page.wait_for_selector("#app[data-ready=true]")
    page.fill("input[name=name]", name)
    page.select_option("select[name=kind]", kind)
    page.fill("input[name=split]", split)
    page.set_input_files("input[name=file]", str(file))
    page.get_by_test_id("upload").click()
    staged = page.get_by_test_id("staged")
    staged.wait_for(state="visible")
    shown = staged.inner_text()
    page.get_by_test_id("confirm-upload").click()
    page.wait_for_url("**/data/*/")
    return shown


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_data_uploaded_from_the_data_page_trains_and_evaluates_a_run_whose_table_fills(
    browser,
    live_server,
    alice,
    settings,
    tmp_path,
    tiny_data_dir,
    redis_url,
    monkeypatch,
):
    import redis

    store = tmp_path / "store"
    settings.STORAGES = {
        **settings.STORAGES,
        "data": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(store)}},
    }
    settings.INSPO_CACHE_DIR = tmp_path / "cache"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    monkeypatch.setattr(run_tasks, "send", e2e.REAL_SEND)
    redis.Redis.from_url(redis_url).flushdb()
    worker = start_worker(
        tmp_path,
        env={
            "CELERY_BROKER_URL": redis_url,
            "INSPO_DATA_DIR": str(tiny_data_dir),
            "INSPO_CACHE_DIR": str(tmp_path / "cache"),
            "INSPO_DATA_STORAGE_OPTIONS": json.dumps({"location": str(store)}),
        },
    )
    try:
        pages = signed_in(browser, live_server, alice)
        page = pages.page
        passages = [
            {"id": f"p{i}", "contents": f'"{c}"\n{CAPITALS[i]} is the capital of {c}.'} for i, c in enumerate(COUNTRIES)
        ]
        shown = upload(page, write(tmp_path / "mine.jsonl", qa(range(6), "t")), "mine", "questions")
        assert "6 records, read as flashrag" in shown and "What is the capital of Peru?\tLima" in shown, shown
        assert "What is the capital of Peru?" in page.get_by_test_id("preview").inner_text()

        # a shape of the team's own: refused naming its keys, then read through the mapping fields it opened
        page.get_by_role("link", name="Data", exact=True).click()
        page.wait_for_selector("#app[data-ready=true]")
        assert not page.get_by_label("Question field").is_visible()
        own = [{"q": f"Where is {c}?", "gold": {"a": [CAPITALS[i]]}} for i, c in enumerate(COUNTRIES[:3])]
        page.fill("input[name=name]", "own")
        page.set_input_files("input[name=file]", str(write(tmp_path / "own.jsonl", own)))
        page.get_by_test_id("upload").click()
        status = page.get_by_test_id("upload-status")
        status.get_by_text("question_field").wait_for()
        assert "the keys gold, q" in status.inner_text() and page.get_by_test_id("staged").is_hidden()
        assert [e for e in pages.errors if "400 (Bad Request)" not in e] == []  # the refusal's own answer only
        pages.errors.clear()
        page.get_by_label("Question field").fill("q")
        page.get_by_label("Answers field").fill("gold.a")
        page.get_by_test_id("upload").click()
        staged = page.get_by_test_id("staged")
        staged.wait_for(state="visible")
        assert "read as mapping (question_field q, answers_field gold.a); ids from line number" in staged.inner_text()
        assert "Where is Chile?\tSantiago" in staged.get_by_test_id("staged-rows").inner_text()
        page.get_by_test_id("discard-upload").click()
        status.get_by_text("Discarded; nothing was kept.").wait_for()
        upload(page, write(tmp_path / "mine-test.jsonl", qa(range(6, 8), "x")), "mine", "questions", "test")
        upload(page, write(tmp_path / "wiki.jsonl", passages), "wiki", "corpus")
        upload(page, write(tmp_path / "bench.jsonl", qa(range(4), "b")), "bench", "questions", "test")
        page.get_by_role("link", name="Data", exact=True).click()
        assert page.get_by_test_id("dataset-row").count() == 3
        pages.shoot("data-page")

        page.get_by_role("link", name="New run").click()
        page.wait_for_selector("#app[data-ready=true]")
        page.fill("input[name=name]", "own data")
        page.select_option("select[name=preset]", "quick")
        page.select_option("select[name=dataset]", "data:mine")
        assert "data:bench" not in page.locator("select[name=dataset] option").all_inner_texts()  # no train split
        page.select_option("select[name=corpus]", "data:wiki")
        page.select_option("select[name=retriever]", "bm25")
        index = page.get_by_test_id("index-status")
        assert index.inner_text().startswith("data:wiki@1 has no bm25 index yet: the run starts its index job")
        page.get_by_label("data:bench", exact=True).check()
        page.get_by_label("builtin", exact=True).check()
        page.fill("input[name=model]", str(tiny_data_dir / "shared" / "tiny-llama"))
        page.select_option("select[name=optimizer_provider]", "rules")
        page.fill("input[name=total_steps]", "2")
        page.fill("textarea[name=overrides]", '{"eval.eval_samples": 4, "evolve_until": 2}')
        page.get_by_role("button", name="Submit").click()
        page.wait_for_url("**/runs/*/")
        run = Run.objects.get(name="own data")
        assert run.config["env"]["dataset"] == "data:mine@2" and run.config["env"]["corpus"] == "data:wiki@1"
        assert run.config["eval"]["benchmarks"] == ["builtin", "data:bench@1"]
        assert run.config["env"]["retriever"] == "bm25"  # the form's choice

        done = wait_until_done(run.pk, worker.process, worker.log)
        assert done.status == Run.Status.FINISHED, f"{done.error}\n{worker.tail()}"
        assert IndexJob.objects.get().status == IndexJob.Status.DONE
        pages.goto("/runs/new/")
        page.wait_for_selector("#app[data-ready=true]")
        page.select_option("select[name=corpus]", "data:wiki")
        page.select_option("select[name=retriever]", "bm25")
        assert page.get_by_test_id("index-status").inner_text().startswith("data:wiki@1 has a bm25 index (job")
        page.select_option("select[name=retriever]", "dense")
        assert page.get_by_test_id("index-status").inner_text().startswith("data:wiki@1 has no dense index yet")
        pages.goto(f"/runs/{run.pk}/")
        page.reload()
        table = page.get_by_test_id("run-table")
        # a column's name, without the leakage mark a benchmark sharing questions with the training data carries
        headers = [h.split("⚠")[0].strip() for h in table.locator("thead th").all_inner_texts()]
        assert headers[0] == "Metric (points, 0–100)" and headers[-1] == "Avg."
        assert set(headers[1:-1]) == {"data:bench@1", "builtin"}
        em = table.get_by_test_id("table-row-em").locator("td").all_inner_texts()
        assert len(em) == 3 and all(text.replace(".", "", 1).isdigit() for text in em)
        size = page.get_by_test_id("download-checkpoint").first.inner_text()  # the tiny model's: tens of MiB
        assert size.startswith(".tar, ") and size.endswith("MiB"), size  # binary units, named as such
        pages.assert_no_errors("data page, run form and run page")
    finally:
        worker.stop()


REACH = Path(__file__).resolve().parents[1] / "engine" / "data" / "reach"


@pytest.mark.django_db(transaction=True)
def test_the_data_page_and_the_run_form_show_how_many_answers_the_corpus_can_reach(
    browser, live_server, alice, settings, tmp_path, monkeypatch
):
    """Hand-made files whose shares are known (tests/engine/data/reach): the Data page starts a check and shows
    37.5 % in the top 3 and 62.5 % anywhere; the New run form offers the check of data that reaches 1 of 6 questions
    and then warns. The worker's work runs here, in the test, where the broker's messages are recorded."""
    from rest_framework.test import APIClient

    from tests.webapp.data.conftest import upload as api_upload
    from webapp.data.indexing import INDEX_TASK
    from webapp.data.models import Dataset
    from workers.indexing import index_execute
    from workers.reach import reach_execute

    settings.STORAGES = {
        **settings.STORAGES,
        "data": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    settings.INSPO_CACHE_DIR = tmp_path / "cache"
    sent: list[tuple[str, list[object], str]] = []
    monkeypatch.setattr(run_tasks, "send", lambda name, args, queue: sent.append((name, args, queue)))
    client = APIClient()
    client.force_authenticate(alice)
    lines = (REACH / "test.jsonl").read_text().splitlines(keepends=True)
    for name, split, content in (
        ("mine", "test", "".join(lines)),
        ("low", "train", "".join(lines[:1] + lines[3:])),  # q1 reached in the top 3, q4-q8 not
        ("wiki", "", (REACH / "corpus.jsonl").read_text()),
    ):
        kind = "corpus" if name == "wiki" else "questions"
        response = api_upload(client, content.encode(), f"{name}.jsonl", name=name, kind=kind, split=split)
        assert response.status_code == 201, response.json()

    def work() -> None:
        """What the cpu worker does with what was sent: the index job, then the checks it released."""
        while sent:
            task, args, _ = sent.pop(0)
            ran = index_execute(job_id=args[0]) if task == INDEX_TASK else reach_execute(check_id=args[0])
            assert ran == "done", (task, ran)

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    mine = Dataset.objects.get(name="mine")
    page.goto(f"{live_server.url}/data/{mine.pk}/")
    form = page.get_by_test_id("reach-form")
    form.locator("select[name=corpus]").select_option("data:wiki")
    form.get_by_test_id("reach-start").click()
    page.wait_for_url(f"**/data/{mine.pk}/")
    assert page.get_by_test_id("reach-check").get_attribute("data-status") == "waiting"  # for the index job
    work()
    page.reload()
    check = page.get_by_test_id("reach-check")
    assert check.get_attribute("data-status") == "done"
    assert check.get_by_test_id("reach-topk").inner_text() == "37.5 % (3 of 8)"
    assert check.get_by_test_id("reach-anywhere").inner_text() == "62.5 % (5 of 8)"
    pages.shoot("data-reach")

    page.get_by_role("link", name="New run").click()
    page.wait_for_selector("#app[data-ready=true]")
    page.select_option("select[name=dataset]", "data:low")
    page.select_option("select[name=corpus]", "data:wiki")
    page.fill("textarea[name=overrides]", '{"env.retriever": "bm25"}')
    page.locator("textarea[name=overrides]").dispatch_event("change")
    line = page.get_by_test_id("reach-line")
    line.get_by_text("Not checked yet").wait_for()
    line.get_by_test_id("reach-check").click()
    line.get_by_text("Checking data:low (train)").wait_for()
    work()
    line.get_by_text("Only 16.7 % of the training questions").wait_for(timeout=15_000)
    assert line.get_attribute("data-level") == "warning" and "You can still submit" in line.inner_text()
    assert page.get_by_role("button", name="Submit").is_enabled()
    pages.assert_no_errors("the Data page's check and the run form's warning")


@pytest.mark.django_db(transaction=True)
def test_the_data_page_and_the_run_page_show_what_the_test_split_shares_with_training(
    browser, live_server, alice, alice_team, settings, tmp_path
):
    """A hand-made train split that repeats two test questions and nearly repeats a third (tests/webapp/data/
    test_leakage.py): the dataset's page lists 3 of 5 with its examples; the run trained on it marks the benchmark in
    Table 1, and its box leaves the three out (EM 0.6 over 5 → 0.0 over 2)."""
    from tests.factories import RunFactory
    from tests.webapp.data.test_leakage import TEST, TRAIN, records
    from webapp.data.services import dataset_upload
    from webapp.runs.models import Evaluation, EvaluationAnswer

    settings.STORAGES = {
        **settings.STORAGES,
        "data": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    for split, rows in (("train", TRAIN), ("test", TEST)):
        file = tmp_path / f"{split}.jsonl"
        file.write_bytes(records(rows))
        with file.open("rb") as handle:
            uploaded = dataset_upload(
                team=alice_team, user=alice, name="mine", kind="questions", split=split, upload=handle,
                filename=file.name,
            )  # fmt: skip
    run = RunFactory(team=alice_team, creator=alice, name="leaky run", status=Run.Status.FINISHED)
    config = run.config
    config["env"]["dataset"] = "data:mine@2"
    config["eval"] |= {"benchmarks": ["data:mine@2"], "split": "test"}
    Run.objects.filter(pk=run.pk).update(config=config)
    evaluation = Evaluation.objects.create(run=run, step=4, benchmark="data:mine@2", metric="em", value=0.6, n=5)
    EvaluationAnswer.objects.bulk_create(
        EvaluationAnswer(evaluation=evaluation, question_id=q, em=float(q in {"x0", "x1", "x2"}), f1=0.0)
        for q, _ in TEST
    )

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/data/{uploaded.version.dataset_id}/")
    report = page.get_by_test_id("dataset-leakage").get_by_test_id("leakage-report")
    assert report.get_attribute("data-leaked") == "3"
    assert "3 of 5 questions also in training (data:mine v1 train): 2 exact, 1 near" in report.inner_text()
    examples = report.get_by_test_id("leakage-example").all_inner_texts()
    assert examples[0] == "exact: “what is the CAPITAL of kenya” (x0) ↔ “What is the capital of Kenya?” (t1)"
    assert examples[2].startswith("near (0.87): “Which river flows through the old royal capital city of Peru today?”")

    pages.goto(f"/runs/{run.pk}/")
    table = page.get_by_test_id("run-table")
    assert table.get_by_test_id("leak-mark").inner_text() == "⚠ 3 of 5 also in training"
    em = table.locator('[data-testid="table-row-em"] td[data-column="data:mine@2"]')
    assert em.inner_text() == "60.0"  # in EM points
    assert "3 of 5 questions also in training" in page.get_by_test_id("run-leakage").inner_text()
    page.get_by_test_id("exclude-overlap").check()
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**exclude_overlap=1*")
    table = page.get_by_test_id("run-table")
    assert table.locator('[data-testid="table-row-em"] td[data-column="data:mine@2"]').inner_text() == "0.0"
    assert table.get_by_test_id("table-excluded").inner_text() == "(3 also in training left out)"
    pages.assert_no_errors("the Data page and the run page with their leakage reports")


@pytest.mark.django_db(transaction=True)
def test_a_refused_upload_reads_as_an_error_and_the_index_table_follows_its_job(
    browser, live_server, alice, alice_team, settings, tmp_path
):
    """A refused file: its message red, with an icon, announced, a sentence before "Nothing was kept.", the bar
    marked failed, and the file picker ready for the next file, which goes through. A corpus's page follows its
    queued index job to running and done without a reload (#54 items 7 and 8)."""
    from webapp.data.services import dataset_upload

    settings.STORAGES = {
        **settings.STORAGES,
        "data": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    settings.INSPO_CACHE_DIR = tmp_path / "cache"
    settings.INSPO_DATA_DIR = tmp_path / "data"
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    page.get_by_role("link", name="Data", exact=True).click()
    page.wait_for_selector("#app[data-ready=true]")
    page.fill("input[name=name]", "broken")
    bad = [{"id": "1", "question": "What is the capital of Peru?", "golden_answers": []}]
    page.set_input_files("input[name=file]", str(write(tmp_path / "bad.jsonl", bad)))
    page.get_by_test_id("upload").click()
    status = page.get_by_test_id("upload-status")
    status.get_by_text("Nothing was kept.").wait_for()
    assert status.get_attribute("role") == "alert" and "error" in (status.get_attribute("class") or "")
    assert status.evaluate("e => getComputedStyle(e).color") == "rgb(176, 0, 32)"
    assert status.locator(".error-icon").inner_text().strip() == "✖"
    assert re.search(r"field 'golden_answers'[^.]*\. Nothing was kept\.$", status.inner_text()), status.inner_text()
    assert page.get_by_test_id("upload-progress").get_attribute("data-state") == "failed"
    assert [e for e in pages.errors if "400 (Bad Request)" not in e] == []  # the refusal's own answer only
    pages.errors.clear()
    picker = page.locator("input[name=file]")
    assert picker.is_enabled() and picker.evaluate("e => e === document.activeElement")
    picker.set_input_files(str(write(tmp_path / "good.jsonl", qa(range(3), "g"))))
    page.get_by_test_id("upload").click()
    page.get_by_test_id("staged").wait_for(state="visible")
    assert page.get_by_test_id("upload-progress").get_attribute("data-state") is None
    assert status.get_attribute("role") is None and "error" not in (status.get_attribute("class") or "")

    passages = [{"id": f"p{i}", "contents": f"{CAPITALS[i]} is the capital of {c}."} for i, c in enumerate(COUNTRIES)]
    file = write(tmp_path / "wiki.jsonl", passages)
    with file.open("rb") as handle:
        uploaded = dataset_upload(
            team=alice_team, user=alice, name="wiki", kind="corpus", split="", upload=handle, filename=file.name
        )
    version = uploaded.version
    job = IndexJob.objects.create(version=version, sha256=version.sha256, method="bm25")  # no worker: the test moves it
    pages.goto(f"/data/{version.dataset_id}/")
    page.wait_for_selector("#app[data-ready=true]")
    row = page.get_by_test_id("index-job")
    assert row.get_attribute("data-status") == "queued"
    IndexJob.objects.filter(pk=job.pk).update(status="running", passages_done=3, passages_total=8, rate=40.0)
    row.get_by_text("3 / 8").wait_for()
    assert row.get_attribute("data-status") == "running" and "40/s" in row.inner_text()
    IndexJob.objects.filter(pk=job.pk).update(status="done", passages_done=8)
    page.wait_for_selector('[data-testid="index-job"][data-status="done"]')
    assert "8 / 8" in row.inner_text() and row.locator("progress").evaluate("e => e.value === e.max")
    pages.assert_no_errors("a refused upload and a followed index job")
