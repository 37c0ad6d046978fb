"""The engine's event sink for the web app: buffers one run's events and writes each batch in one transaction.

A batch is written when the population changes (the end of every step) and when its diversity is measured (so a
live run page sees the step's diversity with the step), at checkpoints and at the run's end, when it reaches
`max_batch` events, or when `max_delay` seconds have passed since the last write. A sink for an attempt writes only
while that attempt holds the run: each batch first locks the run's row on that condition, and once it fails the sink
raises RunSuperseded, now and on every later event. It knows the engine's event kinds and the runs app's tables; it
decides nothing about the run's status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from inspo_engine import events as ev
from inspo_engine.checkpoints import MERGED_DIR, OPTIMIZER_DIR
from webapp.runs.archives import (
    ArchiveDigest,
    ArchiveRefused,
    archive_digest,
    archive_digests,
    checkpoint_files,
    policy_directory,
)
from webapp.runs.lifecycle import Attempt, checkpoints_refresh
from webapp.runs.models import (
    Candidate,
    Checkpoint,
    ControlRequest,
    DiversityRecord,
    Evaluation,
    EvaluationAnswer,
    EvolutionRound,
    Instruction,
    PopulationAlarm,
    PopulationMember,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)
from webapp.runs.selectors import run_directory

log = logging.getLogger(__name__)


class CheckpointDigests(NamedTuple):
    """A saved checkpoint's archive digests: of the plain archive, with the optimizer state (None when it keeps
    none), and with the merged policy (None without one)."""

    plain: ArchiveDigest
    optimizer: ArchiveDigest | None
    merged: ArchiveDigest | None


NOT_STORED = {"stage_started"}
"""Progress only: the watchdog reads it, the database gets it with the heartbeat."""
FLUSH_ON = {
    "run_started",
    "population_changed",
    "population_diversity",
    "population_collapsed",
    "population_recovered",
    "checkpoint_saved",
    "run_finished",
    "run_failed",
}
NOTE_KINDS = {
    "run_started",
    "evolution_completed",
    "population_collapsed",
    "population_recovered",
    "optimizer_failed",
    "tracker_failed",
    "budget_exhausted",
    "control_handled",
    "run_finished",
    "run_failed",
}
METRIC_COLUMNS = ("kl", "entropy", "clip_fraction", "lr", "grad_norm", "pg_loss")
PER_MILLION = Decimal(1_000_000)


def _when(event: ev.Event) -> datetime:
    return datetime.fromtimestamp(event.time, tz=UTC)


def _finite(value: Any) -> float | None:
    """A float JSON and PostgreSQL can hold (NaN and ±inf become None)."""
    if value is None:
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _clean(data: Any) -> Any:
    """Drop NUL characters and non-finite floats: PostgreSQL's text and jsonb refuse them."""
    if isinstance(data, str):
        return data.replace("\x00", "")
    if isinstance(data, float):
        return _finite(data)
    if isinstance(data, dict):
        return {_clean(str(k)): _clean(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_clean(v) for v in data]
    return data


def optimizer_cost(model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    """USD for one call at INSPO_OPTIMIZER_PRICES; None when the model has no price (e.g. a local model)."""
    price = settings.INSPO_OPTIMIZER_PRICES.get(model)
    if price is None:
        return None
    per_in, per_out = (Decimal(str(p)) for p in price)
    return ((per_in * input_tokens + per_out * output_tokens) / PER_MILLION).quantize(Decimal("0.000001"))


@dataclass
class _Batch:
    """Rows collected while one batch of events is read, inserted in bulk at its end."""

    metrics: list[StepMetric] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    snapshots: list[tuple[PopulationSnapshot, list[PopulationMember]]] = field(default_factory=list)
    diversity: list[DiversityRecord] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    answers: list[tuple[Evaluation, list[EvaluationAnswer]]] = field(default_factory=list)
    notes: list[RunNote] = field(default_factory=list)
    run_fields: dict[str, Any] = field(default_factory=dict)


class DatabaseSink:
    """Writes one run's engine events to the database."""

    def __init__(
        self,
        run_id: UUID | str,
        *,
        attempt: Attempt | None = None,
        max_batch: int | None = None,
        max_delay: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.superseded = False
        self.max_batch = max_batch or settings.INSPO_SINK_MAX_BATCH
        self.max_delay = settings.INSPO_SINK_MAX_DELAY_S if max_delay is None else max_delay
        self.clock = clock
        self.pending: list[ev.Event] = []
        self.digests: dict[str, CheckpointDigests | None] = {}
        self.last_flush = clock()
        self.flushes = 0
        self.instructions: dict[str, int] = dict(Instruction.objects.filter(run_id=run_id).values_list("key", "pk"))
        rounds = EvolutionRound.objects.filter(run_id=run_id).order_by("id").values_list("key", "pk")
        self.rounds: dict[str, int] = dict(rounds)
        self.evaluation: dict[str, Any] = dict(
            Run.objects.filter(pk=run_id).values_list("evaluation_progress", flat=True).first() or {}
        )
        self.handlers: dict[str, Callable[[Any, _Batch], None]] = {
            "instruction_added": self._on_instruction_added,
            "step_completed": self._on_step_completed,
            "trajectories_sampled": self._on_trajectories_sampled,
            "population_changed": self._on_population_changed,
            "population_diversity": self._on_population_diversity,
            "population_collapsed": self._on_population_collapsed,
            "population_recovered": self._on_population_recovered,
            "instruction_proposed": self._on_instruction_proposed,
            "instruction_verified": self._on_instruction_verified,
            "instruction_pruned": self._on_instruction_pruned,
            "control_handled": self._on_control_handled,
            "eval_completed": self._on_eval_completed,
            "checkpoint_saved": self._on_checkpoint_saved,
            "run_finished": self._on_run_finished,
        }

    # -- EventSink ---------------------------------------------------------------------------------------------

    def emit(self, event: ev.Event) -> None:
        if self.superseded:
            raise ev.RunSuperseded(f"{self.attempt} no longer holds the run; its events are not stored")
        if event.kind in NOT_STORED:
            return
        if isinstance(event, ev.EvalProgress):  # shown at once, as one row update outside the batches of events
            self._progress(event)
            return
        if isinstance(event, ev.CheckpointSaved):
            self.digests[event.path] = self._digest(event.path)  # hashed here: outside any transaction
        self.pending.append(event)
        due = self.clock() - self.last_flush >= self.max_delay
        if event.kind in FLUSH_ON or len(self.pending) >= self.max_batch or due:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered; a dropped connection is reopened and the batch written once more."""
        if not self.pending:
            return
        for attempt in (1, 2):
            saved = dict(self.instructions), dict(self.rounds)
            try:
                with transaction.atomic():
                    self._fence()
                    self._write(self.pending)
                break
            except DatabaseError:
                self.instructions, self.rounds = saved
                if attempt == 2 or connection.is_usable():
                    raise
                log.warning("run %s: database connection lost while writing events; reconnecting", self.run_id)
                connection.close()
        written = {e.path for e in self.pending if isinstance(e, ev.CheckpointSaved)}
        self.digests = {path: d for path, d in self.digests.items() if path not in written}
        self.pending = []
        self.last_flush = self.clock()
        self.flushes += 1

    def _fence(self) -> None:
        """Inside the batch's transaction: lock the run's row while the attempt holds it, or drop the batch."""
        if self.attempt is None:
            return
        if not self.attempt.held().select_for_update(no_key=True).values_list("pk", flat=True):
            self.superseded, self.pending = True, []
            raise ev.RunSuperseded(f"{self.attempt} no longer holds the run; its events are not stored")

    def _digest(self, path: str) -> CheckpointDigests | None:
        """The digests of the checkpoint's archive; when it keeps an optimizer state, of the archive with it; when it
        holds a merged policy (a LoRA run's last checkpoint), of the archive with that policy."""
        directory = policy_directory(path)
        if not directory.is_dir():
            log.warning("checkpoint %s has no %s directory; not hashed", path, directory.name)
            return None
        root, checkpoint = run_directory(run_id=self.run_id), Path(path)
        try:
            files = checkpoint_files(checkpoint, root=root)
            extra = checkpoint_files(checkpoint, root=root, optimizer=True)[len(files) :]
            merged = (
                archive_digest(checkpoint_files(checkpoint, root=root, merged=True))
                if (checkpoint / MERGED_DIR).is_dir()
                else None
            )
        except ArchiveRefused as refused:
            log.warning("checkpoint %s not hashed: %s", path, refused)
            return None
        plain, whole = archive_digests(files, extra)
        return CheckpointDigests(plain, whole if (checkpoint / OPTIMIZER_DIR).is_dir() else None, merged)

    # -- one batch ---------------------------------------------------------------------------------------------

    def _write(self, batch_events: list[ev.Event]) -> None:
        batch = _Batch()
        for event in batch_events:
            handler = self.handlers.get(event.kind)
            if handler is not None:
                handler(event, batch)
            if event.kind in NOTE_KINDS:
                batch.notes.append(self._note(event))
        self._insert(batch)

    def _insert(self, batch: _Batch) -> None:
        if batch.metrics:
            StepMetric.objects.bulk_create(
                batch.metrics,
                update_conflicts=True,
                unique_fields=["run", "step"],
                update_fields=[f.name for f in StepMetric._meta.concrete_fields if f.name not in ("id", "run", "step")],
            )
        Trajectory.objects.bulk_create(batch.trajectories)
        if batch.snapshots:
            PopulationSnapshot.objects.bulk_create([snapshot for snapshot, _ in batch.snapshots])
            members = []
            for snapshot, rows in batch.snapshots:
                for row in rows:
                    row.snapshot_id = snapshot.pk
                    members.append(row)
            PopulationMember.objects.bulk_create(members)
        DiversityRecord.objects.bulk_create(batch.diversity)
        Evaluation.objects.bulk_create(batch.evaluations)
        answers: list[EvaluationAnswer] = []
        for evaluation, answered in batch.answers:
            for answer in answered:
                answer.evaluation_id = evaluation.pk
                answers.append(answer)
        EvaluationAnswer.objects.bulk_create(answers, ignore_conflicts=True)
        RunNote.objects.bulk_create(batch.notes)
        fields = {**batch.run_fields, "heartbeat_at": timezone.now()}
        Run.objects.filter(pk=self.run_id).update(**fields)

    def _note(self, event: ev.Event) -> RunNote:
        payload = event.to_dict()
        for key in ("kind", "time", "config"):
            payload.pop(key, None)
        return RunNote(
            run_id=self.run_id,
            step=getattr(event, "step", 0),
            kind=event.kind,
            payload=_clean(payload),
            time=_when(event),
        )

    def _instruction_pk(self, key: str | None) -> int | None:
        return self.instructions.get(key) if key else None

    # -- handlers, one per event kind that has a table -----------------------------------------------------------

    def _on_instruction_added(self, event: ev.InstructionAdded, batch: _Batch) -> None:
        info = event.instruction
        round_pk = self.rounds.get(event.round_id) if event.round_id else None
        instruction, _ = Instruction.objects.update_or_create(
            run_id=self.run_id,
            key=info.id,
            defaults={
                "text": _clean(info.text),
                "origin": info.origin,
                "author": _clean(info.author or "")[:150],
                "parent_id": self._instruction_pk(info.parent_id),
                "birth_step": info.birth_step,
                "verify_score": _finite(event.verify_score),
                "round_id": round_pk,
                "retired_step": None,
                "retired_reason": "",
                "retired_weight": None,
            },
        )
        self.instructions[info.id] = instruction.pk
        if round_pk is not None:
            Candidate.objects.filter(round_id=round_pk, text=_clean(info.text)).update(instruction=instruction)

    def _on_step_completed(self, event: ev.StepCompleted, batch: _Batch) -> None:
        metrics = {k: _finite(v) for k, v in event.metrics.items()}
        batch.metrics.append(
            StepMetric(
                run_id=self.run_id,
                step=event.step,
                phase=event.phase,
                reward_mean=_finite(event.reward_mean) or 0.0,
                reward_std=_finite(event.reward_std) or 0.0,
                tool_calls_mean=_finite(event.tool_calls_mean) or 0.0,
                response_length_mean=_finite(event.response_length_mean) or 0.0,
                instruction_length_mean=_finite(event.instruction_length_mean) or 0.0,
                metrics=metrics,
                timings=_clean(dict(event.timings)),
                overhead=_clean(dict(event.overhead.__dict__)),
                time=_when(event),
                **{name: metrics.get(name) for name in METRIC_COLUMNS},
            )
        )
        batch.run_fields.update(step=event.step, total_steps=event.total_steps, overhead=event.overhead.__dict__)

    def _on_trajectories_sampled(self, event: ev.TrajectoriesSampled, batch: _Batch) -> None:
        for t in event.trajectories:
            batch.trajectories.append(
                Trajectory(
                    run_id=self.run_id,
                    step=event.step,
                    instruction_id=self._instruction_pk(t.instruction_id),
                    question=_clean(t.question),
                    golden_answers=_clean(list(t.golden_answers)),
                    response=_clean(t.response),
                    answer=_clean(t.answer),
                    reward=_finite(t.reward) or 0.0,
                    tool_calls=int(t.tool_calls),
                    response_tokens=int(t.response_tokens),
                    error=_clean(t.error or ""),
                )
            )

    def _on_population_changed(self, event: ev.PopulationChanged, batch: _Batch) -> None:
        snapshot = PopulationSnapshot(
            run_id=self.run_id,
            step=event.step,
            reason=event.reason,
            best_id=self._instruction_pk(event.best_id),
            time=_when(event),
        )
        members = [
            PopulationMember(
                instruction_id=self.instructions[m.id],
                weight=_finite(m.weight) or 0.0,
                probability=_finite(m.probability) or 0.0,
                samples=m.samples,
                mean_reward=_finite(m.mean_reward),
                recent_reward=_finite(m.recent_reward),
                recent_low=_finite(m.recent_low),
                recent_high=_finite(m.recent_high),
                recent_samples=m.recent_samples,
            )
            for m in event.members
            if m.id in self.instructions
        ]
        batch.snapshots.append((snapshot, members))
        if event.best_id in self.instructions:
            batch.run_fields["best_instruction_id"] = self.instructions[event.best_id]

    def _on_population_diversity(self, event: ev.PopulationDiversity, batch: _Batch) -> None:
        batch.diversity.append(
            DiversityRecord(
                run_id=self.run_id,
                step=event.step,
                reason=event.reason[:32],
                size=event.size,
                cosine_mean=_finite(event.cosine_mean),
                cosine_min=_finite(event.cosine_min),
                cosine_max=_finite(event.cosine_max),
                jaccard_mean=_finite(event.jaccard_mean),
                strategies=event.strategies,
                entropy=_finite(event.entropy) or 0.0,
                entropy_normalised=_finite(event.entropy_normalised),
                time=_when(event),
            )
        )

    def _on_population_collapsed(self, event: ev.PopulationCollapsed, batch: _Batch) -> None:
        PopulationAlarm.objects.create(
            run_id=self.run_id,
            step=event.step,
            since_step=event.since_step,
            reasons=[r for r in event.reasons if r in ("cosine", "entropy")],
            cosine_min=_finite(event.cosine_min),
            entropy_normalised=_finite(event.entropy_normalised),
            collapse_cosine=_finite(event.collapse_cosine) or 0.0,
            collapse_entropy=_finite(event.collapse_entropy) or 0.0,
            time=_when(event),
        )

    def _on_population_recovered(self, event: ev.PopulationRecovered, batch: _Batch) -> None:
        PopulationAlarm.objects.filter(run_id=self.run_id, cleared_step__isnull=True).update(cleared_step=event.step)

    def _on_instruction_proposed(self, event: ev.InstructionProposed, batch: _Batch) -> None:
        evolution_round = EvolutionRound.objects.create(
            run_id=self.run_id,
            key=event.round_id,
            step=event.step,
            number=event.round,
            proposer=event.proposer,
            parent_id=self._instruction_pk(event.parent_id),
            critique=_clean(event.critique),
            failures=_clean(event.failures),
            optimizer_model=event.optimizer_model[:200],
            input_tokens=event.input_tokens,
            output_tokens=event.output_tokens,
            cost_usd=optimizer_cost(event.optimizer_model, event.input_tokens, event.output_tokens),
        )
        self.rounds[event.round_id] = evolution_round.pk
        Candidate.objects.bulk_create(
            [
                Candidate(
                    round=evolution_round,
                    position=i,
                    text=_clean(c.text),
                    valid=c.valid,
                    score=_finite(c.score),
                    accepted=c.accepted,
                    reason=_clean(c.reason or ""),
                )
                for i, c in enumerate(event.candidates)
            ]
        )

    def _on_instruction_verified(self, event: ev.InstructionVerified, batch: _Batch) -> None:
        round_pk = self.rounds.get(event.round_id)
        if round_pk is None:
            return
        EvolutionRound.objects.filter(pk=round_pk).update(
            parent_score=_finite(event.parent_score), n_questions=event.n_questions
        )
        for c in event.candidates:
            Candidate.objects.filter(round_id=round_pk, text=_clean(c.text)).update(
                score=_finite(c.score), accepted=c.accepted, reason=_clean(c.reason or "")
            )

    def _on_instruction_pruned(self, event: ev.InstructionPruned, batch: _Batch) -> None:
        Instruction.objects.filter(run_id=self.run_id, key=event.instruction_id).update(
            retired_step=event.step, retired_reason=_clean(event.reason)[:200], retired_weight=_finite(event.weight)
        )

    def _on_control_handled(self, event: ev.ControlHandled, batch: _Batch) -> None:
        """The request's outcome; the web app's request ids are its rows' primary keys."""
        if not event.request_id.isdigit():
            return
        ControlRequest.objects.filter(run_id=self.run_id, pk=int(event.request_id)).update(
            status=event.status if event.status in ControlRequest.Status.values else ControlRequest.Status.REJECTED,
            outcome=_clean(event.message),
            applied_at_step=event.step,
            instruction_key=(event.instruction_id or "")[:32],
        )

    def _on_eval_completed(self, event: ev.EvalCompleted, batch: _Batch) -> None:
        checkpoint = None
        if event.checkpoint:
            checkpoint = Checkpoint.objects.filter(run_id=self.run_id, path=event.checkpoint).first()
        common = {
            "run_id": self.run_id,
            "step": event.step,
            "benchmark": event.benchmark[:200],
            "n": event.n,
            "instruction_id": self._instruction_pk(event.instruction_id),
            "checkpoint": checkpoint,
        }
        evaluation = Evaluation(metric=event.metric[:32], value=_finite(event.value) or 0.0, **common)
        batch.evaluations.append(evaluation)
        f1 = _finite(event.f1)
        if f1 is not None and event.metric != "f1":
            batch.evaluations.append(Evaluation(metric="f1", value=f1, **common))
        rows = _answer_rows(event.answers)
        if rows:
            batch.answers.append((evaluation, rows))

    def _progress(self, event: ev.EvalProgress) -> None:
        """The run's row gets where its evaluation stands now, while this attempt holds it."""
        batch = _Batch()
        self._on_eval_progress(event, batch)
        rows = self.attempt.held() if self.attempt is not None else Run.objects.filter(pk=self.run_id)
        rows.update(**batch.run_fields)

    def _on_eval_progress(self, event: ev.EvalProgress, batch: _Batch) -> None:
        """Where the evaluation in progress stands, and the seconds and questions of the run's finished ones (what
        the run's progress and time left are estimated from: `progress.run_progress`)."""
        now = self.evaluation
        if event.done == 0 or now.get("step") != event.step or "started" not in now:
            now["started"] = event.time
        now |= {"step": event.step, "done": event.done, "total": event.total, "benchmark": event.benchmark[:200]}
        now["time"] = event.time
        if event.total and event.done >= event.total:
            now["seconds"] = float(now.get("seconds", 0.0)) + max(0.0, event.time - float(now["started"]))
            now["questions"] = int(now.get("questions", 0)) + event.total
            now["evaluations"] = int(now.get("evaluations", 0)) + 1
        batch.run_fields["evaluation_progress"] = _clean(dict(now))

    def _on_checkpoint_saved(self, event: ev.CheckpointSaved, batch: _Batch) -> None:
        digests = self.digests.get(event.path)
        digest, whole, merged = digests if digests else (None, None, None)
        Checkpoint.objects.update_or_create(
            run_id=self.run_id,
            step=event.step,
            defaults={
                "path": event.path,
                "bytes": event.bytes,
                "sha256": digest.sha256 if digest else "",
                "archive_bytes": digest.size if digest else 0,
                "files": digest.files if digest else [],
                "available": True,
                "layout": Checkpoint.LAYOUT_CHECKPOINT,
                "optimizer_bytes": event.optimizer_bytes,
                "optimizer_sha256": whole.sha256 if whole else "",
                "optimizer_archive_bytes": whole.size if whole else 0,
                "optimizer_available": whole is not None,
                "merged_sha256": merged.sha256 if merged else "",
                "merged_archive_bytes": merged.size if merged else 0,
                "disk_bytes": event.disk_bytes,
            },
        )
        checkpoints_refresh(run_id=self.run_id, keep=event.path)

    def _on_run_finished(self, event: ev.RunFinished, batch: _Batch) -> None:
        fields: dict[str, Any] = {"overhead": event.overhead.__dict__}
        if event.best_instruction_id in self.instructions:
            fields["best_instruction_id"] = self.instructions[event.best_instruction_id]
        batch.run_fields.update(fields)


def _answer_rows(answers: list[Any]) -> list[EvaluationAnswer]:
    """The per-question results of an evaluation (dicts, or objects with the same fields), one row per question id
    (a repeated id keeps its first row)."""
    rows: dict[str, EvaluationAnswer] = {}
    for answer in answers:
        item = answer if isinstance(answer, dict) else vars(answer)
        question_id = _clean(str(item.get("question_id", "")))[:200]
        if not question_id or question_id in rows:
            continue
        rows[question_id] = EvaluationAnswer(
            question_id=question_id,
            em=_finite(item.get("em")) or 0.0,
            f1=_finite(item.get("f1")) or 0.0,
            answer=_clean(str(item.get("answer") or "")),
        )
    return list(rows.values())
