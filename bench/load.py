"""A load test: 50 concurrent dashboard users for 60 s, with a trickle of run submissions, against the web app
under gunicorn on loopback. Nothing may fail and nothing submitted may be lost.

Over the benchmark data set (bench/dataset.py: 100 runs × 300 steps × 7 instructions × 10 evolution rounds), each
of `--clients` clients signs requests with its own user's API token and, with no pause between requests, walks the
dashboards: the runs list, a run page (detail, metric series, population history, lineage, best instruction),
the trajectories of a step, a comparison of 4 runs. One more client submits a smoke-preset run every
`--submit-every` seconds. Afterwards every acknowledged submission (201) must be in the database and in the API's
run list exactly once, and no other run may carry the test's tag. Prints a markdown table: requests, errors,
median and p95 latency per endpoint.

    .venv/bin/python bench/load.py [--clients 50] [--duration 60] [--submit-every 1] [--workers 3] [--threads 4]

The server runs as docker-compose runs it (3 workers × 4 threads), with the API's throttling on and counted in
Redis (DJANGO_CACHE_URL, default redis://127.0.0.1:6379/13: each client is its own user, within its 1200/min),
the team's active-run quota off (INSPO_TEAM_MAX_ACTIVE_RUNS=0: the submissions stay queued; no worker runs them)
and the task broker embedded in a temporary folder. Needs PostgreSQL (BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/inspo_bench) and Redis. Clients, server and PostgreSQL share this machine's
cores, so the figures are the whole system's on it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from dataset import DEFAULT_URL, RUNS, STEPS, TEAM, free_port, prepare, start_server

PathFor = Callable[[random.Random], str]


@dataclass
class Tally:
    """Latencies (s) and failures per endpoint, and what the submitter was told."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    submitted: dict[str, str] = field(default_factory=dict)
    """name → run id, for every submission answered 201."""

    def record(self, endpoint: str, started: float, outcome: str | None) -> None:
        self.latencies[endpoint].append(time.perf_counter() - started)
        if outcome is not None:
            self.errors[endpoint].append(outcome)


def dashboard_walk(run_ids: list[str]) -> list[tuple[str, PathFor]]:
    """What one dashboard user requests, in the order the pages ask for it."""

    def run(suffix: str) -> PathFor:
        return lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/{suffix}"

    def compare(rng: random.Random) -> str:
        picked = rng.sample(run_ids, 4)
        return f"/api/v1/compare/?runs={','.join(picked)}&baseline={picked[0]}"

    return [
        ("runs list", lambda rng: "/api/v1/runs/?page_size=20"),
        ("run detail", run("")),
        ("metric series", run("metrics/")),
        ("population history", run("population/")),
        ("lineage", run("lineage/")),
        ("best instruction", run("best-instruction/")),
        (
            "trajectories of a step",
            lambda rng: f"/api/v1/runs/{rng.choice(run_ids)}/trajectories/?step={rng.randint(1, STEPS)}",
        ),
        ("compare (4 runs)", compare),
    ]


async def dashboard_client(
    base: str, token: str, walk: list[tuple[str, PathFor]], seed: int, until: float, tally: Tally
) -> None:
    rng = random.Random(seed)
    start = rng.randrange(len(walk))  # clients start at different pages
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=60) as http:
        step = start
        while time.perf_counter() < until:
            endpoint, path_for = walk[step % len(walk)]
            step += 1
            started = time.perf_counter()
            try:
                response = await http.get(path_for(rng))
                await response.aread()
                outcome = None if response.status_code == 200 else f"{response.status_code} {response.text[:120]}"
            except httpx.HTTPError as error:
                outcome = f"{type(error).__name__}: {error}"
            tally.record(endpoint, started, outcome)


async def submitter(base: str, token: str, tag: str, every: float, until: float, tally: Tally) -> None:
    """POSTs a smoke-preset run every `every` seconds; a 201's run id is kept under the run's unique name."""
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=60) as http:
        number = 0
        while time.perf_counter() < until:
            name = f"{tag} {number:04d}"
            number += 1
            started = time.perf_counter()
            body = {"team": TEAM, "name": name, "preset": "smoke", "tags": [tag]}
            try:
                response = await http.post("/api/v1/runs/", json=body)
                if response.status_code == 201:
                    tally.submitted[name] = response.json()["id"]
                    outcome = None
                else:
                    outcome = f"{response.status_code} {response.text[:120]}"
            except httpx.HTTPError as error:
                outcome = f"{type(error).__name__}: {error}"
            tally.record("submit a run", started, outcome)
            await asyncio.sleep(max(0.0, every - (time.perf_counter() - started)))


async def drive(base: str, tokens: list[str], run_ids: list[str], tag: str, args: argparse.Namespace) -> Tally:
    tally = Tally()
    walk = dashboard_walk(run_ids)
    until = time.perf_counter() + args.duration
    clients = [dashboard_client(base, token, walk, n, until, tally) for n, token in enumerate(tokens[:-1])]
    await asyncio.gather(*clients, submitter(base, tokens[-1], tag, args.submit_every, until, tally))
    return tally


def load_users(count: int) -> list[str]:
    """`count` members of the bench team (load-00, …), each with a fresh API token."""
    from webapp.accounts.models import ApiToken, Role, Team, User
    from webapp.accounts.services import api_token_create, membership_set, user_create

    team = Team.objects.get(slug=TEAM)
    tokens = []
    for number in range(count):
        username = f"load-{number:02d}"
        user = User.objects.filter(username=username).first()
        if user is None:
            user = user_create(username=username, password=secrets.token_urlsafe(16), validate=False)
        membership_set(team=team, user=user, role=Role.MEMBER, by=None)
        ApiToken.objects.filter(user=user).delete()
        tokens.append(api_token_create(user=user, name="bench load")[1])
    return tokens


def check_submissions(base: str, token: str, tag: str, submitted: dict[str, str]) -> tuple[int, list[str]]:
    """Every acknowledged submission once in the database and once in the API's list under its id, and no other
    run with the tag: how many are present exactly once in both, and what is wrong."""
    from webapp.runs.models import Run

    stored = Counter((name, str(pk)) for name, pk in Run.objects.filter(tags__name=tag).values_list("name", "pk"))
    listed: Counter[tuple[str, str]] = Counter()
    url: str | None = f"{base}/api/v1/runs/?tag={tag}&page_size=200"
    while url:
        page = httpx.get(url, headers={"Authorization": f"Token {token}"}, timeout=60).json()
        listed.update((run["name"], run["id"]) for run in page["results"])
        url = page["next"]
    problems, once = [], 0
    for name, run_id in submitted.items():
        counts = {where: seen[(name, run_id)] for where, seen in (("database", stored), ("API list", listed))}
        once += all(count == 1 for count in counts.values())
        problems += [f"{name} ({run_id}) is in the {where} {n} times" for where, n in counts.items() if n != 1]
    for where, seen in (("database", stored), ("API list", listed)):
        problems += [
            f"{name} ({pk}) is in the {where} but was never acknowledged" for name, pk in seen if name not in submitted
        ]
    return once, problems


ORDER = [name for name, _ in dashboard_walk(["-"] * 4)] + ["submit a run"]


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def report(tally: Tally, args: argparse.Namespace, once: int, problems: list[str], load_before: float) -> None:
    total = sum(len(v) for v in tally.latencies.values())
    errors = sum(len(v) for v in tally.errors.values())
    print(
        f"\n{args.clients} clients ({args.clients - 1} on the dashboards with no pause, 1 submitting every "
        f"{args.submit_every:g} s) for {args.duration:g} s over {RUNS} runs × {STEPS} steps; gunicorn "
        f"{args.workers} workers × {args.threads} threads; {os.cpu_count()} cores shared by clients, server and "
        f"PostgreSQL (load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after).\n"
    )
    print("| endpoint | requests | errors | median ms | p95 ms |")
    print("|---|---:|---:|---:|---:|")
    for endpoint, values in sorted(tally.latencies.items(), key=lambda item: ORDER.index(item[0])):
        print(
            f"| {endpoint} | {len(values)} | {len(tally.errors[endpoint])} | {statistics.median(values) * 1000:.0f} "
            f"| {percentile(values, 95) * 1000:.0f} |"
        )
    print(f"| **all** | {total} ({total / args.duration:.0f}/s) | {errors} | | |")
    print(
        f"\nSubmissions acknowledged: {len(tally.submitted)}; present exactly once: {once}; problems: {len(problems)}"
    )
    for problem in problems[:20]:
        print(f"  - {problem}")
    for endpoint, failures in tally.errors.items():
        for failure, count in Counter(failures).most_common(3):
            print(f"  {endpoint}: {count} × {failure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--cache-url", default=os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients, the submitter included")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds")
    parser.add_argument("--submit-every", type=float, default=1.0, help="seconds between submissions")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--reseed", action="store_true", help="rebuild the data set even if it is there")
    args = parser.parse_args()
    if args.clients < 2:
        raise SystemExit("--clients: at least 2 (one of them submits)")

    state = tempfile.mkdtemp(prefix="inspo-load-state-")
    os.environ.update(
        {
            "INSPO_STATE_DIR": state,  # the embedded broker's queue and a secret key, thrown away afterwards
            "INSPO_TEAM_MAX_ACTIVE_RUNS": "0",
            "DJANGO_CACHE_URL": args.cache_url,
            "DJANGO_STATIC_ROOT": os.path.join(state, "static"),
            "DJANGO_LOG_LEVEL": "WARNING",
        }
    )
    os.makedirs(os.environ["DJANGO_STATIC_ROOT"])
    os.environ.pop("CELERY_BROKER_URL", None)
    prepare(args.database_url, reseed=args.reseed)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from django.db import connection

    from webapp.runs.models import Run

    tokens = load_users(args.clients)
    run_ids = [
        str(pk) for pk in Run.objects.filter(team__slug=TEAM, name__startswith="bench ").values_list("pk", flat=True)
    ]
    connection.close()
    tag = f"load-{secrets.token_hex(4)}"
    port = free_port()
    server = start_server(args.database_url, port, args.workers, args.threads)
    base = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()[0]
    try:
        tally = asyncio.run(drive(base, tokens, run_ids, tag, args))
        once, problems = check_submissions(base, tokens[0], tag, tally.submitted)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)
    Run.objects.filter(tags__name=tag).delete()  # the data set stays as bench/api.py expects it
    report(tally, args, once, problems, load_before)
    if problems or any(tally.errors.values()) or not tally.submitted:
        sys.exit(1)


if __name__ == "__main__":
    main()
