"""What each endpoint of bench/api.py costs at the benchmark's shape — runs of 300 steps, 7 instructions and 10
evolution rounds, evaluated on 7 benchmarks, built by bench/dataset.py's own `seed_run` — in queries (a run's first
reader, then every later one) and in the size of the answer. Not a timing test: these are what grew the last time
the endpoints got slower (docs/benchmarks.md, "API under load"), so a change that adds a query per row or doubles an
answer fails here before it shows in bench/api.py's latencies."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from inspo_engine.presets import preset
from tests.factories import RunFactory
from webapp.runs import selectors
from webapp.runs.models import Run
from webapp.runs.outputs import MetricSeriesOutputSerializer

pytestmark = pytest.mark.django_db

BENCH = Path(__file__).resolve().parents[3] / "bench" / "dataset.py"

BUDGETS = {
    # endpoint: (queries of a run's first reader, of a later reader, most KiB); the sizes have about 10 % to spare
    "run detail": (4, 3, 4),
    "metric series": (3, 2, 55),
    "population history": (6, 2, 215),
    "lineage": (6, 2, 120),
    "compare (4 runs)": (7, 4, 106),
}


def _dataset():
    spec = importlib.util.spec_from_file_location("bench_dataset", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench_runs(alice, alice_team):
    """Four finished runs as bench/dataset.py builds them (bulk inserts: about a second each)."""
    dataset, rng = _dataset(), random.Random(0)
    config = preset("paper").to_dict()
    runs = []
    for index in range(4):
        run = RunFactory(
            team=alice_team,
            creator=alice,
            name=f"bench {index:03d}",
            status=Run.Status.FINISHED,
            backend="verl",
            preset="paper",
            config={**config, "seed": index, "mode": "static" if index == 0 else "online"},
            seed=index,
            step=dataset.STEPS,
            total_steps=dataset.STEPS,
        )
        dataset.seed_run(run, rng)
        runs.append(run)
    return runs


def test_each_benchmark_endpoint_keeps_its_queries_and_its_size(alice, api, bench_runs):
    client = api(alice)
    run = bench_runs[0]
    ids = ",".join(str(r.pk) for r in bench_runs)
    paths = {
        "run detail": f"/api/v1/runs/{run.pk}/",
        "metric series": f"/api/v1/runs/{run.pk}/metrics/",
        "population history": f"/api/v1/runs/{run.pk}/population/",
        "lineage": f"/api/v1/runs/{run.pk}/lineage/",
        "compare (4 runs)": f"/api/v1/compare/?runs={ids}&baseline={run.pk}",
    }
    client.get("/api/v1/ping/")  # the token's first use writes when it was used
    measured = {}
    for name, path in paths.items():
        cache.clear()
        with CaptureQueriesContext(connection) as first:
            response = client.get(path)
        with CaptureQueriesContext(connection) as later:
            again = client.get(path)
        assert response.status_code == again.status_code == 200, name
        assert again.content == response.content, name
        measured[name] = (len(first), len(later), len(response.content) / 1024)
        revalidated = client.get(path, HTTP_IF_NONE_MATCH=response["ETag"])
        assert revalidated.status_code == 304 and revalidated.content == b"", name
    over = [
        name
        for name, (queries_first, queries_later, kib) in measured.items()
        if queries_first > BUDGETS[name][0] or queries_later > BUDGETS[name][1] or kib > BUDGETS[name][2]
    ]
    shown = {name: (first, later, round(kib, 1)) for name, (first, later, kib) in measured.items()}
    assert not over, f"over budget: {over}; all (queries first, queries later, KiB): {shown}; budgets: {BUDGETS}"
    # The metric series skips its output serializer (a field call per number); the schema holds only if the
    # serializer would have sent the same (its keys in another order).
    series = selectors.run_metric_series(run=run)
    render = JSONRenderer().render
    assert json.loads(render(MetricSeriesOutputSerializer(series).data)) == json.loads(render(series))
    assert client.get(paths["metric series"]).json() == json.loads(render(series))
