"""A live run steered from the web app: control requests made while a step runs reach the engine at the next step
boundary through the worker's channel (the database for a torch run, the control file for a verl job), their
outcomes land in the database with the lineage, notes and population, and a run resumed after a crash replays them
before the same step, ending where an uninterrupted run ends."""

from __future__ import annotations

import time

import pytest

from tests.conftest import scripted_config
from tests.engine.fakes import ScriptedBackend
from webapp.runs import selectors, services
from webapp.runs.models import ControlRequest, Instruction, PopulationSnapshot, Run, RunNote, StepMetric
from workers.training import run_execute

TEXT = "Answer with <answer> </answer> only after you <search> </search>; think in <think> </think> first."


@pytest.fixture(autouse=True)
def _worker_settings(worker_settings):
    # The watchdog's own connection cannot see a run this test has not committed, so it takes the claim for lost;
    # a long grace keeps it from ending the test process when a loaded machine makes a run slow.
    worker_settings.INSPO_SHUTDOWN_GRACE_S = 3600
    return worker_settings


class SteeredDuringStep:
    """The scripted policy, with alice steering the run while step `at` rolls out: she retires the first living
    instruction that is not the best, pins the best and injects TEXT unverified; with `crash_at`, the worker dies
    while that step rolls out."""

    def __init__(self, run_id, at, crash_at=None):
        self.inner, self.run_id, self.at, self.crash_at, self.calls = ScriptedBackend(seed=5), run_id, at, crash_at, 0
        self.name = "scripted"

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.crash_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if self.calls == self.at:
            run = Run.objects.get(pk=self.run_id)
            best = run.best_instruction
            other = Instruction.objects.filter(run=run, retired_step__isnull=True).exclude(pk=best.pk).first()
            steer = services.control_request_create
            steer(run=run, user=run.creator, kind="retire", instruction_id=other.key)
            steer(run=run, user=run.creator, kind="pin", instruction_id=best.key)
            steer(run=run, user=run.creator, kind="inject", text=TEXT, verify=False)
        return self.inner.rollout(requests, group_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def submit(user, team):
    return services.run_submit(team=team, user=user, name="steered", config=scripted_config())


def population_of(run):
    return sorted(
        Instruction.objects.filter(run=run).values_list("key", "text", "origin", "author", "retired_step", "birth_step")
    )


@pytest.mark.django_db
def test_requests_made_during_a_step_apply_before_the_next_and_are_stored_with_their_outcome(
    alice, alice_team, gemini_url
):
    run = submit(alice, alice_team)
    assert run_execute(run_id=run.pk, worker="cpu@test", backend=SteeredDuringStep(run.pk, at=3)) == "finished"
    requests = {r.kind: r for r in ControlRequest.objects.filter(run=run)}
    assert {k: (r.status, r.applied_at_step) for k, r in requests.items()} == {
        "retire": ("applied", 4),
        "pin": ("applied", 4),
        "inject": ("applied", 4),
    }
    human = Instruction.objects.get(run=run, origin="human")
    assert human.text == TEXT and human.author == "alice" and human.birth_step == 4 and human.parent is None
    assert requests["inject"].instruction_key == human.key and "unverified" in requests["inject"].outcome
    retired = Instruction.objects.get(run=run, key=requests["retire"].instruction_key)
    assert retired.retired_step == 4 and retired.retired_reason == "retired by hand by alice"
    pinned = Instruction.objects.get(run=run, key=requests["pin"].instruction_key)
    assert pinned.retired_step is None  # pruned at steps 4 and 6 without it
    lineage = {node["id"]: node for node in selectors.run_lineage(run=run)["nodes"]}
    assert lineage[human.key]["author"] == "alice" and lineage[human.key]["origin"] == "human"
    assert lineage[pinned.key]["pinned"] and not lineage[human.key]["pinned"]
    assert PopulationSnapshot.objects.filter(run=run, step=4, reason="steered").exists()
    assert RunNote.objects.filter(run=run, kind="control_handled").count() == 3


@pytest.mark.django_db
def test_a_run_resumed_after_a_crash_replays_its_requests_before_the_same_step(alice, alice_team, gemini_url):
    """The crash comes during step 4's rollout: the requests were applied before step 4, after the checkpoint of
    step 2 that the resume starts from. They are pending again after the rewind, replayed before step 4, and the run
    ends with the population and rewards of a run that was never interrupted."""
    straight = submit(alice, alice_team)
    run_execute(run_id=straight.pk, backend=SteeredDuringStep(straight.pk, at=3))

    run = submit(alice, alice_team)
    with pytest.raises(RuntimeError):
        run_execute(run_id=run.pk, backend=SteeredDuringStep(run.pk, at=3, crash_at=4))
    assert set(ControlRequest.objects.filter(run=run).values_list("status", "applied_at_step")) == {("applied", 4)}
    services.run_resume(run=Run.objects.get(pk=run.pk), user=alice)
    assert run_execute(run_id=run.pk, backend=ScriptedBackend(seed=5)) == "finished"

    assert set(ControlRequest.objects.filter(run=run).values_list("status", "applied_at_step")) == {("applied", 4)}
    assert RunNote.objects.filter(run=run, kind="control_handled").count() == 3
    assert population_of(run) == population_of(straight)

    def rewards(of):
        return list(StepMetric.objects.filter(run=of).order_by("step").values_list("step", "reward_mean"))

    assert len(rewards(run)) == 6 and rewards(run) == rewards(straight)


@pytest.mark.django_db
def test_a_finished_run_rejects_the_requests_it_never_reached(alice, alice_team, gemini_url):
    run = submit(alice, alice_team)

    class LateRequest(SteeredDuringStep):
        def rollout(self, requests, group_size):
            self.calls += 1
            if self.calls == 6:  # during the last step: no boundary follows
                services.control_request_create(
                    run=Run.objects.get(pk=self.run_id), user=alice, kind="inject", text=TEXT, verify=False
                )
            return self.inner.rollout(requests, group_size)

    assert run_execute(run_id=run.pk, backend=LateRequest(run.pk, at=None)) == "finished"
    late = ControlRequest.objects.get(run=run)
    assert late.status == "rejected" and "finished" in late.outcome and late.applied_at_step is None


@pytest.mark.django_db(transaction=True)
def test_a_verl_job_gets_the_requests_through_its_control_file(alice, alice_team, settings, monkeypatch):
    """The GPU path: the job cannot reach the database, so the worker relays pending requests to the run
    directory's control file as it polls the job; the job (tests/engine/verl/fake_job.py, the engine's real loop)
    handles them and its events bring the outcomes back."""
    from tests.engine.verl._support import require_verl

    require_verl()
    import sys
    import threading

    from inspo_engine.presets import preset
    from workers import tasks

    settings.INSPO_VERL_COMMAND = f"{sys.executable} -m tests.engine.verl.fake_job"
    settings.INSPO_VERL_POLL_S = 0.1
    settings.INSPO_VERL_ENV_PASSTHROUGH = ("FAKE_VERL_STEP_S",)
    settings.INSPO_ALLOW_PRIVATE_HOSTS = ["127.0.0.1:9"]
    monkeypatch.setenv("FAKE_VERL_STEP_S", "1.0")
    config = preset("smoke").with_overrides(
        {
            "backend.name": "verl",
            "env.retriever": "remote",
            "env.retriever_url": "http://127.0.0.1:9/retrieve",
            "total_steps": 8,
            "evolution.enabled": False,
            "population.paraphrase_init": False,
        }
    )
    run = services.run_submit(team=alice_team, user=alice, name="verl", config=config.to_dict())

    failures = []

    def steer_after_step_2():
        from django.db import connection

        try:
            deadline = time.monotonic() + 300
            while StepMetric.objects.filter(run=run).count() < 2:
                assert time.monotonic() < deadline, "the job stored no second step in 300 s"
                time.sleep(0.05)
            current = Run.objects.get(pk=run.pk)
            services.control_request_create(run=current, user=alice, kind="inject", text=TEXT, verify=False)
            services.control_request_create(run=current, user=alice, kind="pin", instruction_id="ins-0000")
        except Exception as error:  # reported by the test, not lost in the thread
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=steer_after_step_2, daemon=True)
    thread.start()
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "finished"
    thread.join(5)
    assert not failures
    handled = list(ControlRequest.objects.filter(run=run).order_by("id").values_list("kind", "status"))
    assert handled == [("inject", "applied"), ("pin", "applied")]
    steps = ControlRequest.objects.filter(run=run).values_list("applied_at_step", flat=True)
    assert all(3 <= step <= 8 for step in steps)  # after the step during which they were made
    human = Instruction.objects.get(run=run, origin="human")
    assert human.author == "alice" and human.text == TEXT
    assert selectors.run_pinned_keys(run=run) == {"ins-0000"}
