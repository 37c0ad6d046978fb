"""The GPU queue's path: a `backend: verl` run starts the verl job as a subprocess, its events reach the database
through the same sink as a torch run, a cancel stops it cleanly (stop file, then SIGTERM / SIGKILL), and a job that
dies leaves the run failed with the end of its log.

The subprocess is `tests/engine/verl/fake_job.py` (INSPO_VERL_COMMAND): it takes the launcher's real overrides and
writes real engine events with the scripted policy, so the launcher, the tail, the sink and the task all run."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from tests.engine.verl._support import require_verl

require_verl()

from inspo_engine.presets import preset  # noqa: E402
from tests.conftest import STUB_ENDPOINT  # noqa: E402
from webapp.core.errors import ServiceError  # noqa: E402
from webapp.runs import services  # noqa: E402
from webapp.runs.models import Checkpoint, Instruction, PopulationSnapshot, Run, StepMetric  # noqa: E402
from workers import tasks  # noqa: E402
from workers.verl import EventTail  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

FAKE_JOB = f"{sys.executable} -m tests.engine.verl.fake_job"


@pytest.fixture(autouse=True)
def _gpu_worker(worker_settings, settings, monkeypatch):
    settings.INSPO_VERL_COMMAND = FAKE_JOB
    settings.INSPO_VERL_POLL_S = 0.1
    settings.INSPO_VERL_GRACE_S = 5
    settings.INSPO_VERL_ENV_PASSTHROUGH = (
        "FAKE_VERL_STEP_S",
        "FAKE_VERL_CRASH_AT",
        "FAKE_VERL_IGNORE_STOP",
        "FAKE_VERL_ENV_DUMP",
    )
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:9"]  # the runs' (unused) retriever
    monkeypatch.delenv("FAKE_VERL_STEP_S", raising=False)
    return worker_settings


@pytest.fixture
def submit(alice, alice_team):
    def make(**overrides):
        config = preset("smoke").with_overrides(
            {
                "backend.name": "verl",
                "env.retriever": "remote",
                "env.retriever_url": "http://127.0.0.1:9/retrieve",
                "total_steps": 6,
                **overrides,
            }
        )
        return services.run_submit(team=alice_team, user=alice, name="verl", config=config.to_dict())

    return make


def test_a_verl_run_goes_to_the_gpu_queue_and_stores_the_jobs_events(submit, enqueued):
    run = submit()
    assert run.backend == "verl" and enqueued[-1][2] == "gpu"
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "finished"
    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED and run.step == 6 and run.best_instruction is not None
    assert list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert Instruction.objects.filter(run=run, origin="seed").exists()
    assert PopulationSnapshot.objects.filter(run=run, reason="step").count() == 6
    assert Checkpoint.objects.filter(run=run, available=True).exists()
    out = run_dir(run)
    assert (out / "data" / "train.parquet").is_file() and (out / "config.json").is_file()
    assert "fake verl job" in (out / "verl.log").read_text()


def run_dir(run):
    from workers.training import run_out_dir

    return run_out_dir(run)


def cancel_when(run, condition):
    def watch():
        from django.db import connection

        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not condition():
                time.sleep(0.05)
            services.run_cancel(run=Run.objects.get(pk=run.pk), user=run.creator)
        finally:
            connection.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_cancel_stops_the_job_after_its_step_with_a_checkpoint(submit, monkeypatch):
    monkeypatch.setenv("FAKE_VERL_STEP_S", "0.3")
    run = submit(total_steps=50)
    watcher = cancel_when(run, lambda: StepMetric.objects.filter(run=run).count() >= 2)
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "cancelled"
    watcher.join(5)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and 2 <= run.step < 50
    assert (run_dir(run) / "STOP").exists()
    assert Checkpoint.objects.filter(run=run, step=run.step).exists()  # saved on the way out


def test_a_job_that_ignores_the_stop_file_is_terminated(submit, monkeypatch, settings):
    monkeypatch.setenv("FAKE_VERL_IGNORE_STOP", "1")
    monkeypatch.setenv("FAKE_VERL_STEP_S", "0.3")
    settings.INSPO_VERL_GRACE_S = 1
    run = submit(total_steps=50)
    watcher = cancel_when(run, lambda: StepMetric.objects.filter(run=run).count() >= 2)
    started = time.monotonic()
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "cancelled"
    watcher.join(5)
    assert time.monotonic() - started < 60
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and 2 <= run.step < 50


def test_a_worker_that_lost_its_run_terminates_the_job_without_a_checkpoint_and_stores_nothing_more(
    submit, monkeypatch, alice
):
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from webapp.runs import lifecycle

    monkeypatch.setenv("FAKE_VERL_STEP_S", "0.3")
    run = submit(total_steps=50)
    taken = []

    def take_over():
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not Checkpoint.objects.filter(run=run).exists():
                time.sleep(0.05)
            lifecycle.run_fail_lost(stale_after_s=60, now=timezone.now() + timedelta(hours=1))
            services.run_resume(run=Run.objects.get(pk=run.pk), user=alice)
            taken.append(lifecycle.run_claim(run_id=run.pk, worker="gpu@B"))
            taken.append(StepMetric.objects.filter(run=run).count())
        finally:
            connection.close()

    thread = threading.Thread(target=take_over, daemon=True)
    thread.start()
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "superseded"
    thread.join(5)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.worker == "gpu@B" and taken[0].number == 2
    assert StepMetric.objects.filter(run=run).count() == taken[1] < 50
    assert not (run_dir(run) / "STOP").exists()  # terminated, not asked to checkpoint


def test_a_job_that_dies_fails_the_run_with_its_log(submit, monkeypatch):
    monkeypatch.setenv("FAKE_VERL_CRASH_AT", "3")
    run = submit()
    with pytest.raises(Exception, match="exited with status 1"):
        tasks.run_training.apply(args=[str(run.pk)]).get()
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "CUDA error: an illegal memory access" in run.error
    assert StepMetric.objects.filter(run=run).count() == 2  # what it did before dying is kept


def test_the_job_gets_a_minimal_environment_and_only_its_endpoints_key(submit, gemini_url, monkeypatch, tmp_path):
    """No database URL, Django secret or server key reaches the job: only the key of the endpoint the run names,
    which its optimizer then sends to that endpoint."""
    dump = tmp_path / "job-env.json"
    monkeypatch.setenv("FAKE_VERL_ENV_DUMP", str(dump))
    monkeypatch.setenv("GEMINI_API_KEY", "the-servers-default-key")
    monkeypatch.setenv("DATABASE_URL", "postgres://inspo:pw@db/inspo")
    run = submit(**{"optimizer.provider": "gemini", "optimizer.endpoint": STUB_ENDPOINT, "optimizer.max_retries": 0})
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "finished"
    env = json.loads(dump.read_text())
    assert env["INSPO_OPTIMIZER_API_KEY"] == "test-key" and "PATH" in env
    for name in ("DATABASE_URL", "DJANGO_SECRET_KEY", "GEMINI_API_KEY", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"):
        assert name not in env
    assert "the-servers-default-key" not in json.dumps(env)


def test_the_job_gets_the_teams_mlflow_token_its_run_names_for_verls_own_tracker(
    submit, alice, alice_team, httpserver, settings, monkeypatch, tmp_path
):
    from webapp.accounts.services import team_secret_set

    dump = tmp_path / "job-env.json"
    monkeypatch.setenv("FAKE_VERL_ENV_DUMP", str(dump))
    monkeypatch.setenv("WANDB_API_KEY", "a-key-in-the-workers-environment")
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:9", f"localhost:{httpserver.port}"]
    team_secret_set(team=alice_team, user=alice, name="mlflow-token", value="ml-token-of-alice")
    run = submit(
        **{
            "tracking.backends": ["mlflow"],
            "tracking.mlflow_uri": f"http://localhost:{httpserver.port}",
            "tracking.mlflow_secret": "mlflow-token",
        }
    )
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "finished"  # the stub answers 500: warnings only
    env = json.loads(dump.read_text())
    assert env["MLFLOW_TRACKING_TOKEN"] == "ml-token-of-alice" and "WANDB_API_KEY" not in env


def test_a_run_that_may_not_reach_its_retriever_any_more_never_starts_the_job(submit, settings, tmp_path):
    run = submit()
    settings.INSPO_ALLOW_PRIVATE_HOSTS = []  # the operator withdrew the host after submission
    with pytest.raises(ServiceError, match=r"env\.retriever_url"):  # InvalidInput, as the task result carries it
        tasks.run_training.apply(args=[str(run.pk)]).get()
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "env.retriever_url" in run.error
    assert not (run_dir(run) / "verl.log").exists()


def test_the_tail_waits_for_the_end_of_a_torn_line(tmp_path):
    from inspo_engine.events import RunFailed

    path = tmp_path / "events.jsonl"
    line = '{"kind": "run_failed", "time": 1.0, "step": 3, "error": "x"}\n'
    path.write_text(line[:20])
    tail = EventTail(path)
    assert tail.read() == []
    with path.open("a") as handle:
        handle.write(line[20:])
    assert tail.read() == [RunFailed(step=3, error="x", time=1.0)]
