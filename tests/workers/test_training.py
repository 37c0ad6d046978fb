"""Running a run on a worker: the engine's events land in the database; cancel stops within one step; a crash,
a time limit or a lost worker leaves the run failed with the reason and resumable; redelivery does nothing.

The policy is the engine tests' scripted backend and the optimizer a local server speaking Gemini's REST format,
so the real engine loop, the real Gemini client and the real database sink all run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.conftest import scripted_config
from tests.engine.fakes import ScriptedBackend
from webapp.runs import services
from webapp.runs.archives import archive_digest, checkpoint_files
from webapp.runs.lifecycle import run_fail_lost
from webapp.runs.models import (
    Candidate,
    Checkpoint,
    Evaluation,
    EvolutionRound,
    Instruction,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)
from webapp.runs.selectors import run_directory
from workers import tasks
from workers.training import run_execute

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _worker_settings(worker_settings):
    return worker_settings


@pytest.fixture
def submit(alice, alice_team, gemini_url):
    def make(**overrides):
        config = scripted_config(**overrides)
        return services.run_submit(team=alice_team, user=alice, name="scripted", config=config)

    return make


class CancelledDuringStep:
    """The scripted policy, with a user pressing cancel while step `at` rolls out."""

    def __init__(self, run_id, at):
        self.inner, self.run_id, self.at, self.calls = ScriptedBackend(seed=5), run_id, at, 0
        self.name = "scripted"

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            services.run_cancel(run=Run.objects.get(pk=self.run_id), user=Run.objects.get(pk=self.run_id).creator)
        return self.inner.rollout(requests, group_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class CrashesAtStep(CancelledDuringStep):
    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.inner.rollout(requests, group_size)


def counts(run):
    tables = (StepMetric, Trajectory, PopulationSnapshot, Instruction, EvolutionRound, Checkpoint, Evaluation, RunNote)
    return {model.__name__: model.objects.filter(run=run).count() for model in tables}


def test_a_run_stores_what_the_engine_emits(submit):
    run = submit()
    assert run_execute(run_id=run.pk, worker="cpu@test", backend=ScriptedBackend(seed=5)) == "finished"
    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED and run.step == 6 and run.attempts == 1 and run.worker == "cpu@test"
    assert run.finished_at and run.heartbeat_at and run.overhead["optimizer_calls"] >= 2

    steps = StepMetric.objects.filter(run=run).order_by("step")
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6]
    assert all(s.kl is not None and s.lr == 1e-6 and "update" in s.timings for s in steps)
    assert Trajectory.objects.filter(run=run, step=3).count() == 2

    seed = Instruction.objects.get(run=run, origin="seed")
    children = Instruction.objects.filter(run=run, origin="reflection")
    assert children and all(child.parent is not None and child.round is not None for child in children)
    assert all(child.round.critique for child in children)
    rounds = EvolutionRound.objects.filter(run=run)
    initial = rounds.get(key="init-00000", proposer="paraphrase")
    paraphrases = Instruction.objects.filter(run=run, origin="paraphrase")
    assert paraphrases and all(p.round == initial and p.parent == seed for p in paraphrases)
    assert rounds.filter(proposer="reflection", parent__isnull=False).exists()
    assert seed.children.filter(origin="paraphrase").exists()
    scored = Candidate.objects.filter(round__run=run, score__isnull=False)
    assert scored.filter(accepted=True, instruction__isnull=False).exists()
    assert scored.filter(accepted=False).exclude(reason="").exists()
    reflection = rounds.filter(proposer="reflection").first()
    assert reflection.failures and reflection.input_tokens == 100 and reflection.cost_usd is not None

    snapshots = PopulationSnapshot.objects.filter(run=run)
    assert set(snapshots.values_list("reason", flat=True)) >= {"initialised", "step", "evolved"}
    last = snapshots.order_by("-step", "-id").first()
    assert abs(sum(m.probability for m in last.members.all()) - 1) < 1e-6
    assert run.best_instruction == last.best

    assert Evaluation.objects.filter(run=run, step=6, benchmark="builtin", metric="em").count() == 1
    checkpoints = Checkpoint.objects.filter(run=run).order_by("step")
    assert [c.step for c in checkpoints] == [2, 4, 6] and [c.available for c in checkpoints] == [False, True, True]
    newest = checkpoints.last()
    files = checkpoint_files(Path(newest.path), root=run_directory(run_id=run.pk))
    assert newest.sha256 == archive_digest(files).sha256 and newest.files[0]["name"] == "step-000006/inspo_state.json"
    assert not newest.optimizer_available, "a finished run's last checkpoint keeps no optimizer state"
    assert {"run_started", "run_finished", "evolution_completed"} <= set(
        RunNote.objects.filter(run=run).values_list("kind", flat=True)
    )


def test_events_are_written_in_batches_not_one_by_one(submit, monkeypatch):
    from webapp.runs.recorder import DatabaseSink

    seen = []
    original = DatabaseSink.flush

    def counting_flush(self):
        seen.append(len(self.pending))
        original(self)

    monkeypatch.setattr(DatabaseSink, "flush", counting_flush)
    run = submit()
    run_execute(run_id=run.pk, backend=ScriptedBackend(seed=5))
    written = [n for n in seen if n]
    assert sum(written) > 2 * len(written)  # several events per transaction on average
    assert max(written) >= 3  # a step's metrics, trajectories and population arrive together


def test_cancel_takes_effect_within_one_step_and_keeps_a_checkpoint(submit):
    run = submit()
    backend = CancelledDuringStep(run.pk, at=3)
    assert run_execute(run_id=run.pk, backend=backend) == "cancelled"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and run.step == 3
    assert not StepMetric.objects.filter(run=run, step__gt=3).exists()
    assert Checkpoint.objects.filter(run=run, step=3, available=True).exists()


def test_a_crash_fails_the_run_with_the_reason_and_resume_continues_it(submit, alice, enqueued):
    run = submit()
    with pytest.raises(RuntimeError):
        run_execute(run_id=run.pk, backend=CrashesAtStep(run.pk, at=5))
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "RuntimeError: CUDA error" in run.error and "resumable from the checkpoint of step 4" in run.error
    assert RunNote.objects.filter(run=run, kind="run_failed").exists()
    assert StepMetric.objects.filter(run=run).count() == 4

    services.run_resume(run=run, user=alice)
    assert run_execute(run_id=run.pk, backend=ScriptedBackend(seed=5)) == "finished"
    run.refresh_from_db()
    assert run.status == Run.Status.FINISHED and run.attempts == 2 and run.error == ""
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert Instruction.objects.filter(run=run).count() == len(
        set(Instruction.objects.filter(run=run).values_list("key", flat=True))
    )
    assert RunNote.objects.filter(run=run, kind="run_started").count() == 2


def test_a_time_limit_stops_at_a_step_boundary_and_leaves_the_run_resumable(submit, settings):
    settings.INSPO_RUN_TIME_LIMIT_S = 0
    run = submit()
    assert run_execute(run_id=run.pk, backend=ScriptedBackend(seed=5)) == "failed"
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "time limit" in run.error and run.step == 1
    assert Checkpoint.objects.filter(run=run, step=1).exists()


def test_delivering_the_task_twice_changes_nothing(submit, monkeypatch):
    """The tasks are acks_late: a message may arrive again (worker restart, visibility timeout). The claim is a
    conditional update, so only the first delivery trains."""
    monkeypatch.setattr(
        tasks,
        "run_execute",
        lambda run_id, worker: run_execute(run_id=run_id, worker=worker, backend=ScriptedBackend(seed=5)),
    )
    assert tasks.run_training.acks_late
    run = submit()
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "finished"
    before = counts(run)
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "skipped"
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)  # a duplicate while the first still runs
    assert tasks.run_training.apply(args=[str(run.pk)]).get() == "skipped"
    assert counts(run) == before and Run.objects.get(pk=run.pk).attempts == 1


def test_a_lost_worker_leaves_the_run_failed_and_resumable(submit, alice, enqueued):
    run = submit()
    run_execute(run_id=run.pk, backend=CancelledDuringStep(run.pk, at=3))  # leaves a checkpoint at step 3
    stale = timezone.now() - timedelta(minutes=30)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, heartbeat_at=stale, worker="cpu@gone")
    fresh = services.run_submit(team=run.team, user=alice, name="fresh", config=run.config)
    Run.objects.filter(pk=fresh.pk).update(status=Run.Status.RUNNING, heartbeat_at=timezone.now())

    assert tasks.sweep.apply().get()["runs_lost"] == 1
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error.startswith("worker lost: no heartbeat since")
    assert "resumable from the checkpoint of step 3" in run.error
    assert Run.objects.get(pk=fresh.pk).status == Run.Status.RUNNING
    assert services.run_resume(run=run, user=alice).status == Run.Status.QUEUED


def test_a_restarted_worker_fails_the_runs_it_held(submit):
    run = submit()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, heartbeat_at=timezone.now(), worker="cpu@box")
    assert run_fail_lost(stale_after_s=300, worker="cpu@other") == 0
    assert run_fail_lost(stale_after_s=300, worker="cpu@box") == 1
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "cpu@box restarted" in run.error


def test_time_limits_come_from_settings_soft_below_hard(settings):
    training, evaluation = tasks.run_training, tasks.evaluate
    assert settings.INSPO_RUN_TIME_LIMIT_S < training.soft_time_limit < training.time_limit
    assert evaluation.soft_time_limit < evaluation.time_limit


class LeaksASecret(CancelledDuringStep):
    """A library that puts a key into its log line and its exception, as an HTTP client echoing a header would."""

    def rollout(self, requests, group_size):
        self.calls += 1
        if self.calls == self.at:
            import logging

            logging.getLogger("some.library").warning("retrying with Authorization: Bearer %s", PLANTED)
            raise RuntimeError(f"401 from https://tracker.example: header was 'Bearer {PLANTED}'")
        return self.inner.rollout(requests, group_size)


PLANTED = "planted-team-secret-7f3a9c"


def test_a_team_secret_in_an_exception_or_log_line_never_reaches_a_note_the_error_or_the_log(
    submit, alice, alice_team, caplog
):
    from webapp.accounts.services import team_secret_set

    team_secret_set(team=alice_team, user=alice, name="mlflow-token", value=PLANTED)
    run = submit()
    with pytest.raises(RuntimeError):
        run_execute(run_id=run.pk, backend=LeaksASecret(run.pk, at=3))
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "401 from https://tracker.example" in run.error
    assert PLANTED not in run.error and "[redacted]" in run.error
    notes = RunNote.objects.filter(run=run)
    assert notes.filter(kind="run_failed").exists()
    assert all(PLANTED not in str(payload) for payload in notes.values_list("payload", flat=True))
    assert "retrying with Authorization: Bearer [redacted]" in caplog.text and PLANTED not in caplog.text
