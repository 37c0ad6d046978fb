"""Shared test setup: Django settings for the web tests, PostgreSQL and Redis when reachable (a reasoned skip
otherwise, a failure under INSPO_REQUIRE_SERVICES=1), and two teams — alice's and bob's — for permission tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed: on a loaded machine a first example can take longer than hypothesis's
# default 200 ms deadline, which would fail a correct test. Every run (CI and a developer's alike) uses the
# derandomised `ci` profile with no example database, so the suite passes or fails the same way each time;
# HYPOTHESIS_PROFILE=dev opts into a randomised search locally (a failure it finds becomes an explicit test).
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REQUIRE_SERVICES = os.environ.get("INSPO_REQUIRE_SERVICES") == "1"
POSTGRES = ("127.0.0.1", 5432)
REDIS = ("127.0.0.1", 6379)
TEST_REDIS_URL = "redis://127.0.0.1:6379/15"
ROOT = Path(__file__).resolve().parents[1]


def reachable(address: tuple[str, int], timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def skip_or_fail(reason: str) -> None:
    """Skip with the reason; under INSPO_REQUIRE_SERVICES=1 (CI) fail instead, so a missing service is noticed."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (INSPO_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(reason)


POSTGRES_UP = reachable(POSTGRES)
REDIS_UP = reachable(REDIS)

# Settings are read once, when Django starts (pytest-django does it right after this conftest is imported).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-secret-key-0123456789abcdefghijklmnop")
os.environ.setdefault("INSPO_STATE_DIR", tempfile.mkdtemp(prefix="inspo-test-state-"))
os.environ.setdefault("DJANGO_STATIC_ROOT", os.path.join(os.environ["INSPO_STATE_DIR"], "static"))
os.environ.setdefault("DJANGO_MANIFEST_STATIC", "0")  # pages render without a collectstatic first
os.makedirs(os.environ["DJANGO_STATIC_ROOT"], exist_ok=True)
os.environ.setdefault("INSPO_RUNS_DIR", tempfile.mkdtemp(prefix="inspo-test-runs-"))
if POSTGRES_UP:
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/inspo")
if REDIS_UP:
    os.environ.setdefault("CELERY_BROKER_URL", TEST_REDIS_URL)

try:
    from django.conf import settings as _settings
except ImportError:  # the engine's tests can run without the web stack
    pass
else:
    _settings.DATABASES  # noqa: B018  (loading settings here lets pytest-django set Django up)
    _settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, for tests only


# -- the tiers: what `make test-fast` leaves out ---------------------------------------------------------------

WEIGHTS_FIXTURES = frozenset({"smollm2", "smollm2_dir", "tokenizer", "tiny_model", "tiny_data_dir", "tiny_llama_dir"})
"""Fixtures that need SmolLM2's files: its weights, or its tokenizer (dequantised from the packaged GGUF file into
cache/test-models on first use)."""
TRAINING_FIXTURES = frozenset(
    {"smoke_cli_run", "worker", "start_worker", "scripted_run", "worker_settings", "cli_runs"}
)
"""Fixtures that train a run: the CLI, real Celery workers, or the worker's or the CLI's code path in this process on
the scripted policy (seconds each)."""
BROWSER_DIR = ROOT / "tests" / "browser"
VERL_PATHS = tuple(
    ROOT / path
    for path in (
        "tests/engine/verl",
        "inspo_engine/backends/verl",
        "inspo_engine/verl_job.py",
        "tests/workers/test_gpu_task.py",
    )
)
"""Where every module imports verl, which takes seconds on its own."""
TORCH_PATHS = tuple(
    ROOT / path
    for path in (
        "tests/engine/torch_backend",
        "inspo_engine/backends/torch",
        "tests/engine/test_losses.py",
        "tests/engine/test_machine.py",
        "tests/engine/test_evaluate.py",
        "tests/engine/test_optimizers_local.py",
    )
)
"""Where every module imports torch and transformers, which take seconds on their own. The Makefile's test-fast
leaves these and VERL_PATHS out of its collection (FAST_IGNORE), so a path added here is added there too."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark by where a test lives and what it uses, so that a test there or with those fixtures needs no mark by
    hand: `browser` under tests/browser/, `verl` and `torch` under their PATHS, `weights` for a test that uses one of
    WEIGHTS_FIXTURES (directly or through another fixture), `slow` for one of TRAINING_FIXTURES. Other tests of half
    a second or more carry `@pytest.mark.slow` (MiniLM's `weights`) themselves; docs/development.md has the tiers."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if item.path.is_relative_to(BROWSER_DIR):
            item.add_marker(pytest.mark.browser)
        if any(item.path.is_relative_to(path) for path in VERL_PATHS):
            item.add_marker(pytest.mark.verl)
        if any(item.path.is_relative_to(path) for path in TORCH_PATHS):
            item.add_marker(pytest.mark.torch)
        if used & WEIGHTS_FIXTURES:
            item.add_marker(pytest.mark.weights)
        if used & TRAINING_FIXTURES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """Runs before the test database is made: web tests need PostgreSQL, not the SQLite fallback."""
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        where = "DATABASE_URL names another database" if os.environ.get("DATABASE_URL") else "none is reachable"
        skip_or_fail(f"the web tests need PostgreSQL; {where} (tried {POSTGRES[0]}:{POSTGRES[1]})")


@pytest.fixture
def redis_url() -> str:
    if not REDIS_UP:
        skip_or_fail(f"Redis is not reachable at {REDIS[0]}:{REDIS[1]}")
    return os.environ["CELERY_BROKER_URL"]


# -- people and teams ------------------------------------------------------------------------------------------


@pytest.fixture
def alice(db: Any) -> Any:
    """Owner of alice's team."""
    from tests.factories import MembershipFactory

    return MembershipFactory(user__username="alice", team__name="Alice's team", team__slug="alices", role="owner").user


@pytest.fixture
def alice_team(alice: Any) -> Any:
    return alice.memberships.get().team


@pytest.fixture
def mia(alice_team: Any) -> Any:
    """A member of alice's team: submits and cancels, cannot manage members."""
    from tests.factories import MembershipFactory

    return MembershipFactory(user__username="mia", team=alice_team, role="member").user


@pytest.fixture
def victor(alice_team: Any) -> Any:
    """A viewer in alice's team: reads only."""
    from tests.factories import MembershipFactory

    return MembershipFactory(user__username="victor", team=alice_team, role="viewer").user


@pytest.fixture
def bob(db: Any) -> Any:
    """Owner of bob's team: must never see or touch anything of alice's team."""
    from tests.factories import MembershipFactory

    return MembershipFactory(user__username="bob", team__name="Bob's team", team__slug="bobs", role="owner").user


@pytest.fixture
def bob_team(bob: Any) -> Any:
    return bob.memberships.get().team


@pytest.fixture
def api() -> Callable[[Any], Any]:
    """An API client authenticated with a real API token of the given user (None: anonymous)."""
    from rest_framework.test import APIClient

    from webapp.accounts.services import api_token_create

    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            _, key = api_token_create(user=user, name="tests")
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    return make


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, list[Any], str]]]:
    """What would have been sent to the broker: (task name, args, queue), in order. The web and worker tests use
    it automatically; a test that needs the real broker sets `webapp.runs.tasks.send` back itself."""
    sent: list[tuple[str, list[Any], str]] = []
    monkeypatch.setattr("webapp.runs.tasks.send", lambda name, args, queue: sent.append((name, args, queue)))
    yield sent


# -- a run trained for real by the engine, on a scripted policy ----------------------------------------------------

GEMINI_GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"
STUB_ENDPOINT = "stub-gemini"
"""The operator's optimizer endpoint the tests declare: the stub below, with the server's key 'test-key'."""


def declare_endpoint(settings: Any, name: str, **endpoint: Any) -> None:
    """Add a named optimizer endpoint to the operator's settings, as settings.py builds them."""
    entry = {"provider": "gemini", "base_url": None, "key_env": None, "models": [], "team_calls_per_day": None}
    settings.INSPO_OPTIMIZER_ENDPOINTS = {**settings.INSPO_OPTIMIZER_ENDPOINTS, name: {**entry, **endpoint}}


@pytest.fixture
def gemini_url(httpserver: Any, settings: Any) -> str:
    """A local server answering Gemini's generateContent like a reflective optimizer (the engine tests' stub),
    declared as the endpoint STUB_ENDPOINT."""
    from tests.engine.fakes import gemini_handler

    httpserver.expect_request(GEMINI_GENERATE, method="POST").respond_with_handler(gemini_handler)
    url = str(httpserver.url_for("/"))
    declare_endpoint(settings, STUB_ENDPOINT, base_url=url, api_key="test-key")
    return url


@pytest.fixture
def worker_settings(settings: Any, tmp_path: Any) -> Any:
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tmp_path / "data"
    settings.INSPO_HEARTBEAT_S = 1
    return settings


def scripted_config(**overrides: Any) -> Any:
    """The smoke preset with a Gemini-format optimizer (the STUB_ENDPOINT of the `gemini_url` fixture): 6 steps,
    evolution after step 2, checkpoints every 2."""
    from inspo_engine.presets import preset

    return preset("smoke").with_overrides(
        {
            "optimizer.provider": "gemini",
            "optimizer.model": "gemini-2.5-pro",
            "optimizer.endpoint": STUB_ENDPOINT,
            "optimizer.max_retries": 0,
            "optimizer.timeout_s": 10,
            "total_steps": 6,
            "batch_size": 4,
            "mini_batch_size": 4,
            "micro_batch_size": 4,
            "population_size": 4,
            "n_candidates": 4,
            "verify_samples": 4,
            "log_trajectories": 2,
            "seed": 5,
            **overrides,
        }
    )


@pytest.fixture
def scripted_run(alice: Any, alice_team: Any, gemini_url: str, worker_settings: Any) -> Any:
    """A finished run of alice's team, trained through the worker code path with the scripted policy."""
    from tests.engine.fakes import ScriptedBackend
    from webapp.runs.services import run_submit
    from workers.training import run_execute

    run = run_submit(team=alice_team, user=alice, name="scripted", config=scripted_config())
    run_execute(run_id=run.pk, worker="cpu@tests", backend=ScriptedBackend(seed=5))
    run.refresh_from_db()
    return run


TINY_MODEL = "shared/tiny-llama"
"""Where the tiny Llama lies in `tiny_data_dir` (and so in the `worker` fixture's data directory)."""


@pytest.fixture
def worker(redis_url: str, tmp_path: Any, settings: Any, tiny_data_dir: Path) -> Iterator[Any]:
    """A real `celery worker` process on the cpu queue (see tests/celery_worker.py) and its log file. The test's
    own settings point at the worker's run directory, as a deployment's web and worker processes share one, and at
    `tiny_data_dir` for data: a run that names `backend.model` as `tiny_model_path(settings)` trains the tiny Llama
    in seconds, where SmolLM2's weights are not the point."""
    from tests.celery_worker import celery_worker

    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    yield from celery_worker(redis_url, tmp_path, env={"INSPO_DATA_DIR": str(tiny_data_dir)})


def tiny_model_path(settings: Any) -> str:
    """The tiny Llama's path as a run of the `worker` fixture names it (`backend.model`)."""
    return str(Path(settings.INSPO_DATA_DIR) / TINY_MODEL)


@pytest.fixture(scope="session")
def smoke_cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The smoke preset (4 steps, its own checkpoints) trained once by the CLI, into `<folder>/runs/smoke`, with the
    TensorBoard tracker where tensorboard is installed, and the finished process. Shared by every test that only
    reads a finished smoke run: each run costs one to three minutes of CPU. A test that changes a run copies it."""
    folder = tmp_path_factory.mktemp("smoke-cli")
    out = folder / "runs" / "smoke"
    train = [sys.executable, "-m", "inspo_engine", "train", "--preset", "smoke", "--out", str(out)]
    if importlib.util.find_spec("tensorboard") is not None:
        train += ["--set", 'tracking.backends=["tensorboard"]']
    env = {**os.environ, "INSPO_CACHE_DIR": str(ROOT / "cache"), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(train, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 64-wide Llama with random weights over SmolLM2's real tokenizer, saved as a Hugging Face directory:
    real forward passes, rollouts and GRPO updates in milliseconds, for every test in which SmolLM2's weights are not
    the point (the platform, the workers, checkpoints, adapters)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from inspo_engine.models import SMOLLM2, resolve_model

    target = tmp_path_factory.mktemp("models") / "tiny-llama"
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2, ROOT / "cache" / "test-models"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path) -> Path:
    """INSPO_DATA_DIR holding shared/tiny-llama: the session's tiny random-weight Llama over SmolLM2's tokenizer
    (`tiny_llama_dir`). Real forward passes and GRPO updates in milliseconds."""
    root = tmp_path_factory.mktemp("data")
    shutil.copytree(tiny_llama_dir, root / "shared" / "tiny-llama")
    return root
