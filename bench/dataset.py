"""The benchmark data set, shared by bench/api.py and bench/page.py: a PostgreSQL database (default
`inspo_bench`, created if missing) with one team's 100 runs × 300 steps × 7 instructions × 10 evolution rounds —
metrics, population snapshots, lineage with critiques and candidates, trajectories, evaluations and checkpoints —
and the web app under gunicorn on it."""

from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/inspo_bench"

RUNS, STEPS, POPULATION, ROUNDS = 100, 300, 7, 10
EVOLVE_EVERY = 15  # the paper's: rounds at steps 15, 30, …, 150
CANDIDATES, ACCEPTED = 4, 2
TRAJECTORIES_PER_STEP = 2
BENCHMARKS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")
CHECKPOINT_STEPS = (100, 200, 300)
USERNAME, TEAM = "bench", "bench"


def create_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def seeded() -> bool:
    from webapp.runs.models import Run, StepMetric

    runs = Run.objects.filter(team__slug=TEAM)
    return runs.count() == RUNS and StepMetric.objects.filter(run__in=runs).count() == RUNS * STEPS


def seed(rng: random.Random) -> None:
    """The data set, written with bulk inserts; any earlier bench team is removed first."""
    from django.db import transaction

    from inspo_engine.presets import preset
    from webapp.accounts.models import Team, User
    from webapp.accounts.services import team_create, user_create
    from webapp.runs.models import Run

    Team.objects.filter(slug=TEAM).delete()
    User.objects.filter(username=USERNAME).delete()
    user = user_create(username=USERNAME, password=secrets.token_urlsafe(16), validate=False)
    team = team_create(name=TEAM, slug=TEAM, owner=user)
    config = preset("paper").to_dict()
    for index in range(RUNS):
        with transaction.atomic():
            run = Run.objects.create(
                team=team,
                creator=user,
                name=f"bench {index:03d}",
                status=Run.Status.FINISHED,
                backend="verl",
                preset="paper",
                config={**config, "seed": index, "mode": "static" if index % 10 == 0 else "online"},
                seed=index,
                step=STEPS,
                total_steps=STEPS,
            )
            seed_run(run, rng)
        if (index + 1) % 10 == 0:
            print(f"seeded {index + 1}/{RUNS} runs", file=sys.stderr, flush=True)


def seed_run(run: Any, rng: random.Random) -> None:
    from webapp.runs.models import (
        Candidate,
        Checkpoint,
        Evaluation,
        EvolutionRound,
        Instruction,
        PopulationMember,
        PopulationSnapshot,
        StepMetric,
        Trajectory,
    )

    now = datetime.now(tz=UTC)
    alive = [
        Instruction.objects.create(
            run=run,
            key=f"ins-{i:04d}",
            text=instruction_text(rng),
            origin="seed" if i == 0 else "paraphrase",
            birth_step=0,
        )
        for i in range(POPULATION)
    ]
    weights = {ins.pk: rng.random() for ins in alive}
    next_key = POPULATION
    snapshots: list[tuple[PopulationSnapshot, list[Any]]] = []
    metrics, trajectories = [], []
    round_steps = {EVOLVE_EVERY * (i + 1) for i in range(ROUNDS)}
    for step in range(1, STEPS + 1):
        for ins in alive:
            weights[ins.pk] = 0.9 * weights[ins.pk] + 0.1 * rng.random()
        if step in round_steps:
            # Successive halving drops the two weakest; one reflection round adds two verified children.
            for ins in sorted(alive, key=lambda i: weights[i.pk])[:ACCEPTED]:
                Instruction.objects.filter(pk=ins.pk).update(
                    retired_step=step, retired_reason="pruned: lowest weight", retired_weight=weights[ins.pk]
                )
                alive.remove(ins)
            snapshots.append((PopulationSnapshot(run=run, step=step, reason="pruned", time=now), list(alive)))
            parent = max(alive, key=lambda i: weights[i.pk])
            round_ = EvolutionRound.objects.create(
                run=run,
                key=f"r{step:05d}-001",
                step=step,
                number=1,
                proposer="reflection",
                parent=parent,
                critique=" ".join(rng.choice(WORDS) for _ in range(80)),
                failures=[failure(rng) for _ in range(4)],
                optimizer_model="gemini-2.5-pro",
                input_tokens=rng.randint(2000, 6000),
                output_tokens=rng.randint(300, 900),
                parent_score=40.0,
                n_questions=64,
            )
            candidates = []
            for position in range(CANDIDATES):
                child = None
                if position < ACCEPTED:
                    child = Instruction.objects.create(
                        run=run,
                        key=f"ins-{next_key:04d}",
                        text=instruction_text(rng),
                        origin="reflection",
                        parent=parent,
                        birth_step=step,
                        verify_score=45.0 + position,
                        round=round_,
                    )
                    next_key += 1
                    alive.append(child)
                    weights[child.pk] = weights[parent.pk]
                candidates.append(
                    Candidate(
                        round=round_,
                        position=position,
                        text=child.text if child else instruction_text(rng),
                        score=45.0 + position if child else 30.0,
                        accepted=child is not None,
                        reason="" if child else "verification score 30.0 ≤ parent's 40.0",
                        instruction=child,
                    )
                )
            Candidate.objects.bulk_create(candidates)
            snapshots.append((PopulationSnapshot(run=run, step=step, reason="evolved", time=now), list(alive)))
        snapshots.append((PopulationSnapshot(run=run, step=step, reason="step", time=now), list(alive)))
        metrics.append(
            StepMetric(
                run=run,
                step=step,
                phase="train",
                reward_mean=min(1.0, step / STEPS + rng.gauss(0, 0.05)),
                reward_std=0.3,
                tool_calls_mean=1 + rng.random(),
                response_length_mean=300 + 50 * rng.random(),
                instruction_length_mean=90 + 10 * rng.random(),
                kl=0.001 * rng.random(),
                entropy=1.2,
                clip_fraction=0.01,
                lr=5e-7,
                grad_norm=0.3,
                pg_loss=0.01,
                metrics={"reward_mean": 0.4},
                timings={"rollout": 60.0, "ref": 10.0, "update": 40.0},
                time=now,
            )
        )
        for _ in range(TRAJECTORIES_PER_STEP):
            example = failure(rng)
            trajectories.append(
                Trajectory(
                    run=run,
                    step=step,
                    instruction=rng.choice(alive),
                    question=example["question"],
                    golden_answers=example["golden_answers"],
                    response=example["response"],
                    answer="Paris",
                    reward=example["reward"],
                    tool_calls=1,
                    response_tokens=120,
                )
            )
    PopulationSnapshot.objects.bulk_create([snapshot for snapshot, _ in snapshots], batch_size=2000)
    total = sum(weights[ins.pk] for ins in alive) or 1.0
    PopulationMember.objects.bulk_create(
        [
            PopulationMember(
                snapshot=snapshot,
                instruction=ins,
                weight=weights[ins.pk],
                probability=weights[ins.pk] / total,
                samples=rng.randint(0, 60),
                mean_reward=rng.random(),
            )
            for snapshot, members in snapshots
            for ins in members
        ],
        batch_size=5000,
    )
    StepMetric.objects.bulk_create(metrics, batch_size=2000)
    Trajectory.objects.bulk_create(trajectories, batch_size=2000)
    best = max(alive, key=lambda i: weights[i.pk])
    checkpoints = Checkpoint.objects.bulk_create(
        Checkpoint(run=run, step=step, path=f"/nonexistent/{run.pk}/step-{step:06d}", bytes=6 * 10**9)
        for step in CHECKPOINT_STEPS
    )
    Evaluation.objects.bulk_create(
        Evaluation(
            run=run,
            step=checkpoint.step,
            benchmark=benchmark,
            metric=metric,
            value=rng.random(),
            n=500,
            instruction=best,
            checkpoint=checkpoint,
        )
        for checkpoint in checkpoints
        for benchmark in BENCHMARKS
        for metric in ("em", "f1")
    )
    run.best_instruction = best
    run.save(update_fields=["best_instruction"])


PHRASE = "search the question first then reason about each passage and answer with a short entity name"
WORDS = PHRASE.split()


def instruction_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 90))).capitalize() + "."


def failure(rng: random.Random) -> dict[str, Any]:
    return {
        "question": "Which city hosted the first " + " ".join(rng.choice(WORDS) for _ in range(8)) + "?",
        "response": "<think> " + " ".join(rng.choice(WORDS) for _ in range(60)) + " </think> <search> first "
        "games host </search> <information> " + " ".join(rng.choice(WORDS) for _ in range(150)) + " </information>"
        " <answer> Paris </answer>",
        "golden_answers": ["Athens"],
        "reward": 0.0,
    }


def api_token() -> str:
    from webapp.accounts.models import User
    from webapp.accounts.services import api_token_create

    _, key = api_token_create(user=User.objects.get(username=USERNAME), name=f"bench {time.time():.0f}")
    return key


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(url: str, port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "webapp.config.settings"}
    command = [
        str(Path(sys.executable).parent / "gunicorn"),
        "webapp.config.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/ping/", timeout=1).status_code == 401:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("gunicorn did not answer within 60 s")


def prepare(url: str, *, reseed: bool = False) -> None:
    """Create, migrate and (unless it is there already) fill the database; Django is set up afterwards."""
    create_database(url)
    setup_django(url)
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if reseed or not seeded():
        started = time.perf_counter()
        seed(random.Random(0))
        print(f"seeded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
