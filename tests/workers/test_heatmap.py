"""Evaluating a heatmap for real, on the tiny Llama saved as two checkpoints: through a Celery worker process (the
API queues it, the worker scores every cell on the same questions, the API serves the cells and their answers,
the timeline has both notes); and in this process, how it ends otherwise — a checkpoint deleted meanwhile (the
cells before it are kept), a checkpoint path outside the run's directory (nothing read), a shutdown between two
cells, a second delivery."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.celery_worker import REPO
from tests.conftest import POSTGRES_UP, REDIS_UP
from tests.factories import CheckpointFactory, InstructionFactory, RunFactory
from tests.workers.conftest import tiny_config
from webapp.runs import tasks as run_tasks
from webapp.runs.heatmaps import heatmap_request
from webapp.runs.models import Heatmap, HeatmapCell, Run, RunNote
from webapp.runs.selectors import run_directory
from workers import liveness
from workers.heatmap import heatmap_execute

if not (POSTGRES_UP and REDIS_UP):
    pytest.fail("these tests need PostgreSQL at 127.0.0.1:5432 and Redis at 127.0.0.1:6379", pytrace=False)

pytestmark = pytest.mark.slow

REAL_SEND = run_tasks.send
TIMEOUT_S = 600
SEED = "Answer the question below. Search with <search> query </search>, then answer inside <answer> and </answer>."


def tiny_run(team, user, data_dir, steps=(2, 4)):
    """A finished run on the tiny Llama with two instructions and a checkpoint per step: copies of the model in the
    run's directory, where a worker writes them."""
    config = tiny_config(data_dir, **{"backend.max_new_tokens": 6, "env.max_turn_tokens": 6})
    run = RunFactory(team=team, creator=user, status=Run.Status.FINISHED, config=config.to_dict(), step=max(steps))
    InstructionFactory(run=run, key="ins-0000", text=SEED)
    InstructionFactory(run=run, key="ins-0001", text="Reply with <answer> the answer </answer> only.", birth_step=2)
    for step in steps:
        directory = run_directory(run_id=run.pk) / "checkpoints" / f"step-{step:06d}"
        shutil.copytree(data_dir / "shared" / "tiny-llama", directory / "policy")
        CheckpointFactory(run=run, step=step, path=str(directory))
    return run


def wait_for(heatmap_id, worker):
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        heatmap = Heatmap.objects.get(pk=heatmap_id)
        if heatmap.status in (Heatmap.Status.FINISHED, Heatmap.Status.FAILED):
            return heatmap
        if worker.process.poll() is not None:
            pytest.fail(f"the worker exited with {worker.process.returncode}:\n{worker.tail()}")
        time.sleep(1)
    pytest.fail(f"the heatmap did not end in {TIMEOUT_S} s:\n{worker.tail()}")


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_scores_every_cell_on_the_same_questions_and_the_api_serves_them(
    start_worker, tiny_data_dir, alice, alice_team, api, monkeypatch
):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    worker = start_worker("cpu-heatmap@%h")
    run = tiny_run(alice_team, alice, tiny_data_dir)
    client = api(alice)
    created = client.post(f"/api/v1/runs/{run.pk}/heatmaps/", {"top_k": 2, "sample_size": 3}, format="json")
    assert created.status_code == 202, created.content

    heatmap = wait_for(created.json()["id"], worker)
    assert heatmap.status == Heatmap.Status.FINISHED, f"{heatmap.error}\n{worker.tail()}"
    assert heatmap.worker.startswith("cpu-heatmap@") and len(heatmap.question_ids) == 3
    cells = list(HeatmapCell.objects.filter(heatmap=heatmap).order_by("row", "column"))
    assert [(c.instruction.key, c.checkpoint.step) for c in cells] == [
        ("ins-0000", 2),
        ("ins-0000", 4),
        ("ins-0001", 2),
        ("ins-0001", 4),
    ]
    for cell in cells:
        assert cell.finished_at is not None and cell.n == 3 and 0.0 <= cell.em <= cell.f1 + 1e-9 <= 1.0 + 1e-9
        assert [answer["question_id"] for answer in cell.trajectories] == heatmap.question_ids
        assert all(answer["instruction_id"] == cell.instruction.key for answer in cell.trajectories)

    body = client.get(f"/api/v1/runs/{run.pk}/heatmaps/{heatmap.pk}/").json()
    assert body["status"] == "finished" and body["cells_done"] == 4 and body["questions"] == 3
    detail = client.get(f"/api/v1/runs/{run.pk}/heatmaps/{heatmap.pk}/cells/{cells[3].pk}/").json()
    assert [a["response"] for a in detail["trajectories"]] == [a["response"] for a in cells[3].trajectories]
    kinds = list(RunNote.objects.filter(run=run).order_by("id").values_list("kind", flat=True))
    assert kinds == ["heatmap_requested", "heatmap_finished"]


@pytest.fixture
def local(settings, tmp_path, tiny_data_dir):
    """This process as the worker: the tiny model's data and a run directory of its own."""
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    settings.INSPO_DATA_DIR = tiny_data_dir
    settings.INSPO_SHARED_DATA_DIR = tiny_data_dir / "shared"
    settings.INSPO_CACHE_DIR = REPO / "cache"
    return tiny_data_dir


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_deleted_meanwhile_fails_the_heatmap_and_keeps_the_cells_before_it(local, alice, alice_team):
    run = tiny_run(alice_team, alice, local)
    heatmap = heatmap_request(run=run, user=alice, instructions=["ins-0001"], sample_size=2)
    shutil.rmtree(run_directory(run_id=run.pk) / "checkpoints" / "step-000004")  # keep_last got there first

    with pytest.raises(Exception, match="the checkpoint of step 4 is no longer on disk"):
        heatmap_execute(heatmap_id=heatmap.pk, worker="cpu@tests")
    heatmap.refresh_from_db()
    assert heatmap.status == Heatmap.Status.FAILED
    assert heatmap.error.startswith("CheckpointGone: the checkpoint of step 4 is no longer on disk")
    done = {c.checkpoint.step: c.n for c in heatmap.cells.all()}
    assert done == {2: 2, 4: 0}
    assert RunNote.objects.get(run=run, kind="heatmap_failed").payload["cells_done"] == 1
    assert heatmap_execute(heatmap_id=heatmap.pk, worker="cpu@tests") == "skipped"  # a failed heatmap stays so


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_outside_the_runs_directory_is_not_read(local, alice, alice_team, tmp_path):
    run = tiny_run(alice_team, alice, local, steps=(2,))
    elsewhere = tmp_path / "elsewhere" / "step-000002"
    shutil.copytree(local / "shared" / "tiny-llama", elsewhere / "policy")
    run.checkpoints.update(path=str(elsewhere))
    heatmap = heatmap_request(run=run, user=alice, top_k=1, sample_size=1)
    with pytest.raises(Exception, match="not in the run's directory"):
        heatmap_execute(heatmap_id=heatmap.pk, worker="cpu@tests")
    assert not heatmap.cells.filter(finished_at__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_a_shutdown_stops_the_heatmap_between_two_cells_keeping_the_first(local, alice, alice_team):
    run = tiny_run(alice_team, alice, local, steps=(2,))
    heatmap = heatmap_request(run=run, user=alice, top_k=2, sample_size=1)
    liveness.request_shutdown()
    try:
        assert heatmap_execute(heatmap_id=heatmap.pk, worker="cpu@tests") == "stopped"
    finally:
        liveness.shutdown_forget()
    heatmap.refresh_from_db()
    assert heatmap.status == Heatmap.Status.FAILED
    assert heatmap.error == "the worker cpu@tests shut down after 1 of 2 cells; they are kept"
    assert [c.finished_at is not None for c in heatmap.cells.order_by("row")] == [True, False]
