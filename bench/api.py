"""What the dashboards' queries cost: API latency and throughput over a database the size of a busy team's.

Fills a PostgreSQL database (default `inspo_bench`, created if missing) with 100 runs × 300 steps × 7 instructions
× 10 evolution rounds — metrics, population snapshots, lineage with critiques and candidates, trajectories,
evaluations and checkpoints — starts the web app under gunicorn, and drives the run detail, metric series,
population, lineage and compare endpoints with 8 concurrent clients, each against the trivial `ping` endpoint of
the same server in the same run. Prints a markdown table: median and p95 latency, requests/s, and the ratio of
each endpoint's median to ping's (what our queries cost on top of auth and the framework).

The server's cache is Redis, as in docker-compose (a database of its own, emptied first, so every run's first
request in the benchmark is a miss: the population row mixes those with cached answers); the API's throttle counts
there too, at a rate the benchmark's one user stays under.

    .venv/bin/python bench/api.py [--requests 400] [--clients 8] [--workers 4] [--threads 2] [--reseed]

Needs PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/inspo_bench) and Redis
(BENCH_CACHE_URL, default redis://127.0.0.1:6379/13). Seeding takes about a minute and is skipped when the
database already holds the data set.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

import httpx
from dataset import DEFAULT_URL, POPULATION, ROUNDS, RUNS, STEPS, TEAM, api_token, free_port, prepare, start_server


async def load(
    base: str, token: str, path_for: Callable[[random.Random], str], requests: int, clients: int
) -> tuple[list[float], float]:
    """`requests` GETs spread over `clients` concurrent keep-alive connections: latencies (s) and wall time."""
    latencies: list[float] = []
    remaining = iter(range(requests))
    headers = {"Authorization": f"Token {token}"}

    async def client(number: int) -> None:
        rng = random.Random(number)
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
            for _ in remaining:
                started = time.perf_counter()
                response = await http.get(path_for(rng))
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise SystemExit(f"{response.request.url}: {response.status_code} {response.text[:200]}")

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    return latencies, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--requests", type=int, default=400, help="requests per endpoint")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--cache-url", default=os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--reseed", action="store_true", help="rebuild the data set even if it is there")
    args = parser.parse_args()

    # The server's settings too (start_server passes the environment on). One user sends every request here, and
    # with the cache shared its throttle counts them all: keep the throttle (its Redis round trips are part of the
    # cost) at a rate this load stays under.
    os.environ.update({"DJANGO_CACHE_URL": args.cache_url, "INSPO_API_RATE_USER": "1000000/min"})
    prepare(args.database_url, reseed=args.reseed)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from django.core.cache import cache
    from django.db import connection

    cache.clear()

    from webapp.runs.models import PopulationMember, Run

    run_ids = [str(pk) for pk in Run.objects.filter(team__slug=TEAM).values_list("pk", flat=True)]
    members = PopulationMember.objects.filter(snapshot__run__team__slug=TEAM).count()
    token = api_token()
    connection.close()

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
    port = free_port()
    server = start_server(args.database_url, port, args.workers, args.threads)
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        for name, path_for in endpoints.items():
            asyncio.run(load(base, token, path_for, args.clients * 4, args.clients))  # warm connections, caches
            latencies, wall = asyncio.run(load(base, token, path_for, args.requests, args.clients))
            size = len(
                httpx.get(base + path_for(random.Random(0)), headers={"Authorization": f"Token {token}"}).content
            )
            rows.append((name, statistics.median(latencies), percentile(latencies, 95), len(latencies) / wall, size))
            print(f"{name}: done", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)

    ping_median = rows[0][1]
    print(
        f"\n{RUNS} runs × {STEPS} steps × {POPULATION} instructions × {ROUNDS} evolution rounds "
        f"({members:,} population rows); {args.requests} requests per endpoint from {args.clients} concurrent "
        f"clients; gunicorn {args.workers} workers × {args.threads} threads, Redis cache; {os.cpu_count()} CPU cores "
        "shared by server, PostgreSQL, Redis and clients.\n"
    )
    print("| endpoint | median ms | p95 ms | req/s | median ÷ ping | response KiB | p95 < 100 ms |")
    print("|---|---:|---:|---:|---:|---:|:-:|")
    for name, median, p95, rate, size in rows:
        ok = "yes" if p95 < 0.100 else "**no**"
        print(
            f"| {name} | {median * 1000:.1f} | {p95 * 1000:.1f} | {rate:.0f} | {median / ping_median:.1f}× "
            f"| {size / 1024:.0f} | {ok} |"
        )


if __name__ == "__main__":
    main()
