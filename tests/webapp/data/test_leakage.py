"""Leakage on hand-made files whose answer is known: a training split that repeats two of the five test questions
(one with other case and punctuation) and nearly repeats a third (one word added), beside a template sibling of a
training question (another entity: not a duplicate) and an unrelated question, so 3 of 5 leak: 2 exact, 1 near.
The reports on the API and the Data page, the run page's and the API's Table 1 without those questions, the
experiment's verdicts without them, the cache, the worker's task for a large pair, and team isolation."""

from __future__ import annotations

import pytest

from tests.factories import RunFactory
from tests.webapp.data.conftest import jsonl, upload
from webapp.data import leakage
from webapp.data.models import Dataset
from webapp.runs.models import Evaluation, EvaluationAnswer, Run

pytestmark = pytest.mark.django_db

TRAIN = [
    ("t0", "Which river flows through the old royal capital city of Peru?"),
    ("t1", "What is the capital of Kenya?"),
    ("t2", "Who wrote the novel Things Fall Apart?"),
    ("t3", "How many moons does Mars have?"),
    ("t4", "What year did the Berlin Wall fall?"),
    ("t5", "Which ocean lies west of Chile?"),
]
TEST = [
    ("x0", "what is the CAPITAL of kenya"),  # exact: t1 after normalisation
    ("x1", "What year did the Berlin Wall fall?"),  # exact: t4
    ("x2", "Which river flows through the old royal capital city of Peru today?"),  # near t0: 9 of 10 bigrams
    ("x3", "Which ocean lies east of Chile?"),  # t5's template, another direction: not a duplicate
    ("x4", "Who painted the Mona Lisa?"),  # unrelated
]
LEAKED = {"x0": ("t1", "exact"), "x1": ("t4", "exact"), "x2": ("t0", "near")}


def records(rows):
    return jsonl([{"id": i, "question": q, "golden_answers": ["a"]} for i, q in rows])


@pytest.fixture
def mine(alice, api):
    """alice's data:mine: version 1 its train split, version 2 its test split."""
    client = api(alice)
    for split, rows in (("train", TRAIN), ("test", TEST)):
        response = upload(client, records(rows), filename=f"{split}.jsonl", split=split)
        assert response.status_code == 201, response.json()
    return Dataset.objects.get(name="mine")


def test_the_dataset_report_counts_exact_and_near_duplicates_with_examples(mine, alice, api):
    response = api(alice).get(f"/api/v1/datasets/{mine.pk}/leakage/")
    assert response.status_code == 200, response.json()
    (report,) = response.json()
    assert (report["train"], report["evaluation"]) == ("data:mine v1 train", "data:mine v2 test")
    assert (report["status"], report["questions"], report["train_questions"]) == ("done", 5, 6)
    assert (report["leaked"], report["exact"], report["near"], report["threshold"]) == (3, 2, 1, 0.8)
    assert {o["evaluation_id"]: (o["train_id"], o["kind"]) for o in report["overlaps"]} == LEAKED
    near = next(o for o in report["overlaps"] if o["kind"] == "near")
    assert 0.85 < near["similarity"] < 0.9  # 9 shared bigrams of weight ln(1 + 11/2), one of ln(12): 0.871
    assert [e["evaluation_id"] for e in report["examples"]] == ["x0", "x1", "x2"]
    assert report["examples"][0]["train_question"] == "What is the capital of Kenya?"
    assert (
        report["text"] == "3 of 5 questions also in training (data:mine v1 train): 2 exact, 1 near (similarity ≥ 0.8)"
    )


def test_the_data_page_shows_the_report_and_its_examples(mine, alice, client):
    client.force_login(alice)
    page = client.get(f"/data/{mine.pk}/").content.decode()
    assert 'data-testid="dataset-leakage"' in page
    assert "3 of 5 questions also in training (data:mine v1 train): 2 exact, 1 near" in page
    assert "“what is the CAPITAL of kenya” (x0) ↔ “What is the capital of Kenya?” (t1)" in page


def test_other_datasets_are_compared_both_ways(mine, alice, api):
    client = api(alice)
    bench = [("b0", "How many moons does Mars have?"), ("b1", "Who painted the Mona Lisa?")]
    assert upload(client, records(bench), filename="b.jsonl", name="bench", split="test").status_code == 201
    reports = client.get(f"/api/v1/datasets/{mine.pk}/leakage/").json()
    assert [(r["train"], r["evaluation"], r["leaked"]) for r in reports] == [
        ("data:mine v1 train", "data:mine v2 test", 3),
        ("data:mine v1 train", "data:bench v1 test", 1),
    ]
    bench_id = Dataset.objects.get(name="bench").pk
    (seen_from_bench,) = client.get(f"/api/v1/datasets/{bench_id}/leakage/").json()
    assert seen_from_bench["evaluation"] == "data:bench v1 test" and seen_from_bench["exact"] == 1


def test_a_report_is_computed_once_and_kept_by_content(mine, data_storage, monkeypatch):
    train, test = (leakage.version_file(v) for v in mine.versions.order_by("number"))
    first = leakage.leakage_report(train, test)
    kept = list((data_storage / "leakage").rglob("*.json"))
    assert len(kept) == 1 and train.sha256 in str(kept[0]) and test.sha256 in str(kept[0])
    monkeypatch.setattr(leakage, "find_overlap", lambda *a, **k: pytest.fail("computed again"))
    assert leakage.leakage_report(train, test) == first


def test_a_large_pair_is_checked_by_a_worker_meanwhile_the_report_says_so(mine, enqueued, monkeypatch):
    from workers.tasks import check_leakage

    monkeypatch.setattr(leakage, "SYNC_QUESTIONS", 10)
    train, test = (leakage.version_file(v) for v in mine.versions.order_by("number"))
    report = leakage.leakage_report(train, test)
    assert report.status == "checking" and report.text == "being checked against data:mine v1 train"
    assert enqueued == [(leakage.LEAKAGE_TASK, [train.spec, test.spec], "cpu")]
    leakage.leakage_report(train, test)
    assert len(enqueued) == 1  # asked once while the worker has it
    assert check_leakage.apply(args=[train.spec, test.spec]).get() == "3 of 5"
    assert leakage.leakage_report(train, test).leaked == 3


def test_the_builtin_splits_share_no_question(mine):
    report = leakage.leakage_report(leakage.builtin_file("train"), leakage.builtin_file("test"))
    assert (report.status, report.leaked) == ("done", 0) and report.questions > 100


# -- a run trained on data:mine and evaluated on its test split ------------------------------------------------------


@pytest.fixture
def run(mine, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    config = run.config
    config["env"]["dataset"] = "data:mine@2"
    config["eval"] |= {"benchmarks": ["data:mine@2", "builtin"], "split": "test"}
    Run.objects.filter(pk=run.pk).update(config=config)
    run.refresh_from_db()
    for benchmark, right in (("data:mine@2", {"x0", "x1", "x2"}), ("builtin", {"builtin-single-00001"})):
        evaluation = Evaluation.objects.create(run=run, step=4, benchmark=benchmark, metric="em", value=0.6, n=5)
        ids = [i for i, _ in TEST] if benchmark != "builtin" else ["builtin-single-00001", "builtin-single-00002"]
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=q, em=float(q in right), f1=float(q in right))
            for q in ids
        )
    return run


def test_the_run_reports_each_benchmark_and_table_1_can_leave_the_overlap_out(run, alice, api):
    client = api(alice)
    reports = {r["benchmark"]: r for r in client.get(f"/api/v1/runs/{run.pk}/leakage/").json()}
    assert (reports["data:mine@2"]["leaked"], reports["builtin"]["leaked"]) == (3, 0)
    assert reports["builtin"]["train"] == "data:mine v1 train"
    full = {c["benchmark"]: c for c in client.get(f"/api/v1/runs/{run.pk}/table/").json()["benchmarks"]}
    assert (full["data:mine@2"]["em"], full["data:mine@2"]["n"]) == (pytest.approx(0.6), 5)
    table = client.get(f"/api/v1/runs/{run.pk}/table/?exclude_overlap=true").json()
    cells = {c["benchmark"]: c for c in table["benchmarks"]}
    assert (cells["data:mine@2"]["em"], cells["data:mine@2"]["n"], cells["data:mine@2"]["excluded"]) == (0.0, 2, 3)
    assert (cells["builtin"]["em"], cells["builtin"]["n"], cells["builtin"]["excluded"]) == (0.5, 2, 0)
    assert table["average"]["em"] == pytest.approx(0.25)


def test_the_run_page_marks_the_benchmark_and_its_toggle_leaves_the_questions_out(run, alice, client):
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "⚠ 3 of 5 also in training" in page and 'data-testid="exclude-overlap"' in page
    assert "<strong>data:mine@2</strong>: 3 of 5 questions also in training (data:mine v1 train)" in page
    assert "<strong>builtin</strong>: none of " in page
    assert "also in training left out" not in page
    excluded = client.get(f"/runs/{run.pk}/?exclude_overlap=1").content.decode()
    assert '2, step 4 <span data-testid="table-excluded">(3 also in training left out)</span>' in excluded


def test_another_team_sees_neither_report(run, mine, bob, api):
    client = api(bob)
    assert client.get(f"/api/v1/runs/{run.pk}/leakage/").status_code == 404
    assert client.get(f"/api/v1/datasets/{mine.pk}/leakage/").status_code == 404


# -- an experiment whose runs train on data:mine and are evaluated on its test split ---------------------------------


def test_the_verdicts_say_which_questions_they_are_computed_on(mine, alice, alice_team, api, client):
    from django.utils import timezone

    from webapp.experiments.services import experiment_submit

    spec = {
        "preset": "smoke",
        "arms": ["static", "inspo"],
        "seeds": 2,
        "overrides": {"env.dataset": "data:mine"},
        "evaluation": {"benchmarks": ["data:mine"], "split": "test"},
    }
    experiment = experiment_submit(team=alice_team, user=alice, name="leaky", spec=spec)
    for run in experiment.runs.all():
        right = {"x0", "x1", "x2"} if run.arm == "inspo" else {"x3"} if run.seed else set()
        evaluation = Evaluation.objects.create(run=run, step=4, benchmark="data:mine@2", metric="em", value=0, n=5)
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=q, em=float(q in right), f1=float(q in right))
            for q, _ in TEST
        )
    experiment.runs.update(status=Run.Status.FINISHED, finished_at=timezone.now())
    url = f"/api/v1/experiments/{experiment.pk}/"
    whole = api(alice).get(url).json()
    name = whole["leakage"][0]["benchmark"]  # as the experiment names it: data:mine, pinned or not
    assert name in ("data:mine", "data:mine@2")
    assert whole["leakage"] == [
        {
            "benchmark": name,
            "questions": 5,
            "leaked": 3,
            "excluded": False,
            "text": f"{name}: 3 of 5 evaluated questions also in training; the verdicts include them",
        }
    ]
    assert "× 5 questions" in whole["results"]["arms"][1]["verdict"]
    clean = api(alice).get(url + "?exclude_overlap=true").json()
    assert clean["exclude_overlap"] and clean["leakage"][0]["text"] == (
        f"{name}: computed on the 2 of 5 evaluated questions not in training (3 left out)"
    )
    assert "× 2 questions" in clean["results"]["arms"][1]["verdict"]
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert f"⚠</span> {name}: 3 of 5 evaluated questions also in training" in page
    assert 'href="?exclude_overlap=1"' in page
    page = client.get(f"/experiments/{experiment.pk}/?exclude_overlap=1").content.decode()
    assert "computed on the 2 of 5 evaluated questions not in training (3 left out)" in page
