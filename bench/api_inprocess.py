"""What each endpoint of bench/api.py costs in-process, one request at a time: no server, no concurrency, so what
is measured is the endpoint's own work — its queries, the Python per row and the JSON encoding — not the machine's
load. Over the same data set as bench/api.py (bench/dataset.py; seeded when missing), through Django's test client
with the benchmark user's token and a Redis cache as in a deployment.

For every endpoint it sends, for each of `--samples` runs (4 runs for compare), one request with the cache emptied
first (uncached: what a run's first reader pays) and one right after it (cached: what every later reader of a
settled run pays; the same as uncached where the endpoint caches nothing), and a third with If-None-Match set to
the second's ETag where the endpoint sends one. Prints a markdown table: queries, the time PostgreSQL took for
them, response KiB, and the median and p95 of each kind of request.

    .venv/bin/python bench/api_inprocess.py [--samples 30] [--database-url URL] [--cache-url URL]

Run it from an older checkout (git worktree add) with this file copied in, over the same database, to see what an
endpoint cost before a change: it uses only the test client and bench/dataset.py.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

from dataset import DEFAULT_URL, TEAM, api_token, prepare


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--cache-url", default=os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--samples", type=int, default=30, help="runs (or 4-run comparisons) per endpoint")
    args = parser.parse_args()
    os.environ.update({"DJANGO_CACHE_URL": args.cache_url, "INSPO_API_RATE_USER": "1000000/min"})
    prepare(args.database_url)

    from django.core.cache import cache
    from django.db import connection
    from django.test import Client

    from webapp.runs.models import Run

    run_ids = [str(pk) for pk in Run.objects.filter(team__slug=TEAM).order_by("name").values_list("pk", flat=True)]
    client = Client(HTTP_AUTHORIZATION=f"Token {api_token()}")

    def compare(rng: random.Random) -> str:
        picked = rng.sample(run_ids, 4)
        return f"/api/v1/compare/?runs={','.join(picked)}&baseline={picked[0]}"

    endpoints: dict[str, Callable[[random.Random], str]] = {
        "ping (trivial)": lambda rng: "/api/v1/ping/",
        "run detail": lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/",
        "metric series": lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/metrics/",
        "population history": lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/population/",
        "lineage": lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/lineage/",
        "compare (4 runs)": compare,
    }

    class Queries:
        """Every query the connection runs inside, with its time (a wrapper survives the connection's reopening,
        which the request signals may do, where Django's query log would be cut)."""

        def __init__(self) -> None:
            self.times: list[float] = []

        def __call__(self, execute: Callable[..., object], *args: object) -> object:
            started = time.perf_counter()
            try:
                return execute(*args)
            finally:
                self.times.append(time.perf_counter() - started)

    def timed(path: str, **headers: str) -> tuple[float, int, bytes, str | None]:
        started = time.perf_counter()
        response = client.get(path, **headers)
        elapsed = time.perf_counter() - started
        if response.status_code not in (200, 304):
            raise SystemExit(f"{path}: {response.status_code} {response.content[:200]!r}")
        return elapsed, response.status_code, response.content, response.headers.get("ETag")

    client.get("/api/v1/ping/")  # the first request imports the URL conf and the views
    print(f"\nin-process, one request at a time, {args.samples} samples per endpoint; ms median / p95\n")
    print(
        "| endpoint | queries uncached · cached | SQL ms uncached | response KiB | uncached ms | cached ms | 304 ms |"
    )
    print("|---|---|---:|---:|---|---|---|")
    for name, path_for in endpoints.items():
        rng = random.Random(0)
        uncached, cached, revalidated, sql, queries = [], [], [], [], (0, 0)
        size = 0
        for _ in range(args.samples):
            path = path_for(rng)
            cache.clear()
            first, second = Queries(), Queries()
            with connection.execute_wrapper(first):
                timed(path)
            sql.append(sum(first.times))
            # Timed again without counting queries (which costs a little per query), from an empty cache.
            cache.clear()
            uncached.append(timed(path)[0])
            with connection.execute_wrapper(second):
                timed(path)
            elapsed, _, body, etag = timed(path)
            cached.append(elapsed)
            queries, size = (len(first.times), len(second.times)), len(body)
            if etag:
                elapsed, status, _, _ = timed(path, HTTP_IF_NONE_MATCH=etag)
                if status == 304:
                    revalidated.append(elapsed)

        def cell(values: list[float]) -> str:
            return f"{statistics.median(values) * 1000:.1f} / {percentile(values, 95) * 1000:.1f}" if values else "—"

        print(
            f"| {name} | {queries[0]} · {queries[1]} | {statistics.median(sql) * 1000:.1f} | {size / 1024:.0f} "
            f"| {cell(uncached)} | {cell(cached)} | {cell(revalidated)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
