"""Chaos, with real processes: a Celery worker is killed with -9 in the middle of a run (while its step waits on
the optimizer). The sweep of the ops worker fails the run as lost, with the reason, within the configured time; a
resume on a fresh worker continues from the newest checkpoint; and the finished run's population, metrics,
evaluation and final weights equal those of an uninterrupted run with the same seed. With LoRA too, whose last
checkpoint's two downloads then load as they are: the adapters with peft onto the base, the merged policy with
transformers alone."""

from __future__ import annotations

import io
import json
import tarfile
import time

import pytest

from tests.conftest import POSTGRES_UP, REDIS_UP
from tests.workers.conftest import tiny_config
from webapp.runs import services
from webapp.runs import tasks as run_tasks
from webapp.runs.models import (
    Checkpoint,
    Evaluation,
    Instruction,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)

if not (POSTGRES_UP and REDIS_UP):
    pytest.fail("the chaos test needs PostgreSQL at 127.0.0.1:5432 and Redis at 127.0.0.1:6379", pytrace=False)

REAL_SEND = run_tasks.send
LOST_AFTER_S, SWEEP_EVERY_S = 4, 1
TIMEOUT_S = 120


def wait_for(condition, what, worker, timeout=TIMEOUT_S, every=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}:\n{worker.tail()}")


def finished(run_id, worker):
    run = wait_for(
        lambda: Run.objects.filter(pk=run_id).exclude(status__in=Run.ACTIVE).first(), "the run's end", worker
    )
    assert run.status == Run.Status.FINISHED, f"{run.error}\n{worker.tail()}"
    return run


def outcome(run):
    """Everything an exact resume must reproduce: per-step metrics, the sampled responses (token for token), the
    population after every change, every instruction with its lineage and fate, the evaluation, the best
    instruction and the final weights."""
    steps = list(
        StepMetric.objects.filter(run=run)
        .order_by("step")
        .values_list("step", "reward_mean", "reward_std", "response_length_mean", "kl", "pg_loss", "grad_norm")
    )
    populations = [
        (s.step, s.reason, s.best.text, sorted((m.instruction.text, m.weight, m.samples) for m in s.members.all()))
        for s in PopulationSnapshot.objects.filter(run=run).order_by("step", "id")
    ]
    instructions = sorted(
        (i.text, i.origin, i.birth_step, i.parent.text if i.parent else None, i.retired_step)
        for i in Instruction.objects.filter(run=run)
    )
    responses = list(Trajectory.objects.filter(run=run).order_by("step", "id").values_list("step", "response"))
    evaluations = list(Evaluation.objects.filter(run=run).values_list("step", "benchmark", "metric", "value"))
    final = Checkpoint.objects.get(run=run, step=run.total_steps)
    return {
        "steps": steps,
        "responses": responses,
        "populations": populations,
        "instructions": instructions,
        "evaluations": evaluations,
        "best": run.best_instruction.text,
        "weights": final.sha256,
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_worker_killed_mid_run_fails_it_in_time_and_resume_reproduces_the_uninterrupted_run(
    start_worker, optimizer_gate, tiny_data_dir, alice, alice_team, monkeypatch, lora, api, tmp_path
):
    monkeypatch.setattr(run_tasks, "send", REAL_SEND)
    timing = {"INSPO_LOST_AFTER_S": str(LOST_AFTER_S), "INSPO_SWEEP_EVERY_S": str(SWEEP_EVERY_S)}
    sweeper = start_worker("ops-chaos@%h", queues="ops", beat=True, **timing)
    cpu = start_worker("cpu-chaos@%h", **timing)
    config = tiny_config(tiny_data_dir, **({"grpo.use_lora": True, "grpo.lora_rank": 4} if lora else {}))

    straight = services.run_submit(team=alice_team, user=alice, name="uninterrupted", config=config)
    straight = finished(straight.pk, cpu)

    chaos = services.run_submit(team=alice_team, user=alice, name="killed", config=config)
    # The first optimizer call after the checkpoint of step 2 is the evolution at step 4: it hangs there.
    optimizer_gate.hold_when = lambda: Checkpoint.objects.filter(run=chaos, step=2).exists()
    assert optimizer_gate.holding.wait(TIMEOUT_S), cpu.tail()
    wait_for(lambda: Run.objects.get(pk=chaos.pk).stage == "propose, step 4", "the heartbeat's stage", cpu)
    newest = Checkpoint.objects.filter(run=chaos, available=True).order_by("-step").first()
    assert newest is not None and newest.step == 2

    cpu.kill()
    killed_at = time.monotonic()
    again = start_worker("cpu-chaos-2@%h", **timing)  # a fresh worker, for the resume
    failed = wait_for(
        lambda: Run.objects.filter(pk=chaos.pk, status=Run.Status.FAILED).first(), "the sweep", sweeper, timeout=60
    )
    within = time.monotonic() - killed_at
    assert within <= LOST_AFTER_S + 2 * SWEEP_EVERY_S + 5, f"failed {within:.1f} s after the kill"
    assert failed.error.startswith("worker lost: no heartbeat since")
    assert failed.error.endswith("(resumable from the checkpoint of step 2)")
    optimizer_gate.release.set()

    services.run_resume(run=failed, user=alice)
    chaos = finished(chaos.pk, again)
    assert chaos.attempts == 2 and chaos.worker.startswith("cpu-chaos-2@")
    resumed = RunNote.objects.filter(run=chaos, kind="run_started").order_by("time").last()
    assert resumed.payload["resumed_from_step"] == 2

    assert outcome(chaos) == outcome(straight)
    if lora:
        final = Checkpoint.objects.get(run=chaos, step=chaos.total_steps)
        the_downloads_load(api(alice), final, tiny_data_dir / "shared" / "tiny-llama", tmp_path)


def the_downloads_load(client, checkpoint, base_dir, tmp_path):
    """The adapters (the default download) load with peft onto the base model, the merged policy (`?policy=merged`)
    with transformers alone, and both compute the same logits."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    url = f"/api/v1/runs/{checkpoint.run_id}/checkpoints/{checkpoint.pk}/archive/"
    for name, params in (("adapter", {}), ("merged", {"policy": "merged"})):
        response = client.get(url, params)
        assert response.status_code == 200, response.content
        with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
            archive.extractall(tmp_path / name, filter="data")
    policy = f"step-{checkpoint.step:06d}/policy"
    adapter = json.loads((tmp_path / "adapter" / policy / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "tiny-llama"  # the base's name, not the server's path
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    with_adapters = PeftModel.from_pretrained(base, str(tmp_path / "adapter" / policy)).eval()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / policy).eval()
    ids = torch.tensor([[1, 5, 9, 40, 2]])
    with torch.no_grad():
        expected = with_adapters(input_ids=ids).logits
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, atol=1e-4, rtol=1e-4)
