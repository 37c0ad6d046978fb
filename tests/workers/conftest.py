"""Nothing here reaches a broker unless a test asks for one: enqueued tasks are recorded instead.

For the tests that run real worker processes: a tiny policy model on disk, an optimizer stub whose answers can be
held (a step that hangs where the test chooses), and a starter for workers wired to both."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GEMINI_GENERATE, STUB_ENDPOINT, declare_endpoint


@pytest.fixture(autouse=True)
def _record_instead_of_sending(enqueued: Any) -> None:
    """Every test here records what it would enqueue (see the `enqueued` fixture)."""


# -- real workers on a tiny model ------------------------------------------------------------------------------


def tiny_config(data_dir: Path, **overrides: Any) -> Any:
    """The smoke preset on the tiny model, BM25 retrieval and the optimizer stub: 6 steps, a checkpoint every 2,
    evolutions at steps 2, 4 and 6 (optimizer calls: one at initialisation, then one per evolution)."""
    from inspo_engine.presets import preset

    return preset("smoke").with_overrides(
        {
            "backend.model": str(data_dir / "shared" / "tiny-llama"),
            "env.retriever": "bm25",
            "optimizer.provider": "gemini",
            "optimizer.model": "gemini-2.5-pro",
            "optimizer.endpoint": STUB_ENDPOINT,
            "optimizer.max_retries": 0,
            "optimizer.timeout_s": 300,
            "total_steps": 6,
            "evolve_until": 6,
            "checkpoint.keep_last": 2,
            "seed": 11,
            **overrides,
        }
    )


@dataclass
class OptimizerGate:
    """The Gemini stub with a gate: the first request that arrives once `hold_when()` is true waits until
    `release` is set — a step that hangs in its optimizer call, where the test chooses."""

    url: str
    hold_when: Callable[[], bool] | None = None
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def should_hold(self) -> bool:
        if self.hold_when is None or self.holding.is_set():
            return False
        from django.db import connection

        try:
            return self.hold_when()
        finally:
            connection.close()  # the stub's thread keeps no connection open


@pytest.fixture
def optimizer_gate(httpserver: Any, settings: Any) -> Iterator[OptimizerGate]:
    from tests.engine.fakes import gemini_handler

    gate = OptimizerGate(url=str(httpserver.url_for("/")))

    def handler(request: Any) -> Any:
        if gate.should_hold():
            gate.holding.set()
            gate.release.wait(600)
        return gemini_handler(request)

    httpserver.expect_request(GEMINI_GENERATE, method="POST").respond_with_handler(handler)
    declare_endpoint(settings, STUB_ENDPOINT, base_url=gate.url, api_key="test-key")
    yield gate
    gate.release.set()


@pytest.fixture
def start_worker(
    redis_url: str, tmp_path: Path, settings: Any, tiny_data_dir: Path, optimizer_gate: OptimizerGate
) -> Iterator[Callable[..., Any]]:
    """Starts real workers on a clean Redis database, all stopped at the end; the test process shares their
    run and data directories. `start(name, queues="cpu", beat=False, **env)`."""
    import redis

    from tests.celery_worker import start_worker as start

    redis.Redis.from_url(redis_url).flushdb()
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    endpoints = {STUB_ENDPOINT: {"provider": "gemini", "base_url": optimizer_gate.url, "key_env": "STUB_GEMINI_KEY"}}
    common = {
        "CELERY_BROKER_URL": redis_url,
        "INSPO_DATA_DIR": str(tiny_data_dir),
        "INSPO_OPTIMIZER_ENDPOINTS": json.dumps(endpoints),
        "STUB_GEMINI_KEY": "test-key",
        "INSPO_HEARTBEAT_S": "1",
    }
    started: list[Any] = []

    def launch(name: str, queues: str = "cpu", beat: bool = False, **env: str) -> Any:
        worker = start(
            tmp_path, name=name, queues=queues, beat=beat, env={**common, **env}, log_name=f"{name.split('@')[0]}.log"
        )
        started.append(worker)
        return worker

    yield launch
    optimizer_gate.release.set()
    for worker in started:
        worker.stop()
