"""The experiment page: it carries the API's own JSON of the experiment (the charts draw from it, and a refresh of
the page brings sections and JSON from one computation of the statistics), shows the machines its runs computed on,
and says when a comparison had no variance at all."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.webapp.experiments.conftest import finish
from webapp.experiments import selectors
from webapp.runs.models import RunNote

pytestmark = pytest.mark.django_db


def carried(page: str) -> dict:
    start = page.index('<script id="experiment-detail" type="application/json">') + len(
        '<script id="experiment-detail" type="application/json">'
    )
    return json.loads(page[start : page.index("</script>", start)])


def started_on(run, machine: dict[str, str] | None) -> None:
    payload = {"resumed_from_step": 0, "backend": "torch", "machine": machine or {}}
    RunNote.objects.create(run=run, step=0, kind="run_started", payload=payload, time=datetime.now(UTC))


def test_the_page_carries_the_apis_json_and_computes_the_statistics_once(client, alice, api, experiment, monkeypatch):
    for run in experiment.runs.all():
        finish(run, correct=2 + run.seed + (run.arm == "inspo"))
    calls = []
    compute = selectors.experiment_results
    monkeypatch.setattr(selectors, "experiment_results", lambda *a, **k: calls.append(1) or compute(*a, **k))
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert len(calls) == 1
    assert carried(page) == api(alice).get(f"/api/v1/experiments/{experiment.pk}/").json()
    assert 'data-live="data"' in page


def test_the_page_lists_the_machines_the_runs_computed_on_and_warns_when_they_differ(client, alice, experiment):
    here, there = {"cpu": "AMD EPYC", "cpu_flags": "avx512_bf16"}, {"cpu": "Intel Xeon", "cpu_flags": "amx_bf16"}
    runs = {(run.arm, run.seed): run for run in experiment.runs.all()}
    started_on(runs["static", 0], here)
    started_on(runs["inspo", 0], here)
    started_on(runs["static", 1], there)
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert '<li data-testid="machine-group">cpu AMD EPYC, cpu_flags avx512_bf16: static-s0, inspo-s0</li>' in page
    assert '<li data-testid="machine-group">cpu Intel Xeon, cpu_flags amx_bf16: static-s1</li>' in page
    assert 'data-testid="machines-warning"' in page and "The runs computed on 2 different machines." in page
    machines = carried(page)["results"]["machines"]
    assert [group["runs"] for group in machines] == [["static-s0", "inspo-s0"], ["static-s1"]]


def test_one_machine_is_listed_without_a_warning(client, alice, experiment):
    for run in experiment.runs.all():
        started_on(run, {"cpu": "AMD EPYC"})
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "cpu AMD EPYC: static-s0, static-s1, inspo-s0, inspo-s1" in page  # as the runs table lists them
    assert 'data-testid="machines-warning"' not in page


def test_a_comparison_without_variance_says_the_interval_cannot_be_estimated(client, alice, api, experiment):
    for run in experiment.runs.all():
        finish(run, correct=3)  # every run answers the same questions right
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    verdict = page[page.index('data-testid="verdict" data-arm="inspo"') :].split("</li>")[0]
    assert "+0.0 EM points [+0.0, +0.0]" in verdict
    assert "both arms scored every question alike in every seed, so the interval cannot be estimated" in verdict
    row = page[page.index('data-testid="arm-row" data-arm="inspo"') :].split("</tr>")[0]
    assert "no variance: every paired score was the same, so the interval cannot be estimated" in row
    assert "every paired difference was the same, so there is no variance to extrapolate from" in row
    comparison = api(alice).get(f"/api/v1/experiments/{experiment.pk}/").json()["results"]["arms"][1]["comparison"]
    assert comparison["without_variance"] is True and comparison["seeds_needed"]["seeds"] is None
    assert comparison["seeds_needed"]["reason"].startswith("every paired difference was the same")
