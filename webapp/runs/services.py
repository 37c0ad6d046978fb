"""Operations on runs — submit, cancel, clone, resume, evaluate, steer, export, and a team's default trackers for its
runs — shared by pages, the API and admin.

Each checks the caller's role in the run's team, changes state with conditional updates where a worker may race
it, and enqueues work only after the transaction commits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inspo_engine.config import MAX_INSTRUCTION_CHARS, RunConfig
from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import Conflict, Gone, InvalidInput, QuotaExceeded
from webapp.data.services import job_data_record, run_data_record

from . import selectors, tasks
from .configs import (
    Admission,
    benchmark_paths,
    benchmarks_named,
    config_admit,
    config_total_steps,
    tracking_named,
    tracking_section,
)
from .endpoints import net_policy, tracking_errors, url_errors
from .lifecycle import runs_start_pending
from .models import Checkpoint, ControlRequest, EvaluationRequest, Instruction, PopulationAlarm, Run, RunNote, RunTag

if TYPE_CHECKING:
    from webapp.experiments.models import Experiment

MAX_TAGS = 20


def _clean_tags(tags: Sequence[str]) -> list[str]:
    cleaned = sorted({tag.strip() for tag in tags if tag.strip()})
    if len(cleaned) > MAX_TAGS:
        raise InvalidInput({"tags": [f"at most {MAX_TAGS} tags"]})
    too_long = [tag for tag in cleaned if len(tag) > 64]
    if too_long:
        raise InvalidInput({"tags": [f"tags are at most 64 characters: {too_long[0][:20]}…"]})
    return cleaned


def _active_runs_check(team: Team, *, wait: bool = False) -> bool:
    """Inside a transaction: lock the team's row (concurrent submissions queue behind it) and refuse one more
    active run when the team already has INSPO_TEAM_MAX_ACTIVE_RUNS queued, running or cancelling (0: no limit).
    With `wait`, a full quota is no refusal: True says the run must wait as pending."""
    most = settings.INSPO_TEAM_MAX_ACTIVE_RUNS
    if not most:
        return False
    Team.objects.select_for_update().filter(pk=team.pk).first()
    active = Run.objects.filter(team=team, status__in=Run.ACTIVE).count()
    if active >= most and wait:
        pending_slots_check(team, runs=1)
        return True
    if active >= most:
        raise QuotaExceeded(
            f"your team may have {most} runs queued or running at once and has {active}; "
            "wait for one to finish or cancel one"
        )
    return False


def pending_slots_check(team: Team, *, runs: int) -> None:
    """Refuse (400) `runs` more pending runs when they would take the team past INSPO_TEAM_MAX_PENDING_RUNS, saying
    how many slots are left. Call it holding the team's row (`_active_runs_check` locks it)."""
    most = settings.INSPO_TEAM_MAX_PENDING_RUNS
    if not most:
        return
    pending = Run.objects.filter(team=team, status=Run.Status.PENDING).count()
    if pending + runs > most:
        left = max(0, most - pending)
        raise InvalidInput(
            {
                "seeds": [
                    f"your team may have {most} runs waiting for a slot and has {pending}, so {left} "
                    f"{'is' if left == 1 else 'are'} left; this would add {runs}: use fewer arms or seeds, or "
                    "wait for the team's experiments to finish"
                ]
            }
        )


def experiment_pending_check(team: Team, *, runs: int) -> None:
    """Inside a transaction: lock the team's row and refuse an experiment of `runs` runs whose runs beyond the free
    active slots would take the team past its pending runs (`pending_slots_check`), before any of them is stored."""
    Team.objects.select_for_update().filter(pk=team.pk).first()
    most = settings.INSPO_TEAM_MAX_ACTIVE_RUNS
    if not most:
        return
    active = Run.objects.filter(team=team, status__in=Run.ACTIVE).count()
    waiting = runs - max(0, most - active)
    if waiting > 0:
        pending_slots_check(team, runs=waiting)


def run_submit(
    *,
    team: Team,
    user: User,
    name: str,
    preset: str = "",
    config: RunConfig | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    tags: Sequence[str] = (),
) -> Run:
    """Compose the run's config, admit it once (the engine's validation and the platform's rules), and store it as
    a queued run (`run_create`). Pages and the API hand it what they were given:

    - `preset`: a preset's name, stored with the run ('' for none);
    - `config`: either a partial config (a mapping, merged over the preset section by section), or a whole
      RunConfig, taken as it is (the preset then only names the run's origin);
    - `overrides`: `{"grpo.lr": 1e-6, "evolve_every": 10}`, by dotted path, the paper's name or a unique leaf
      name, applied last.

    The config is preset ⊕ config ⊕ overrides, then the team's rules (`configs.config_admit`: paths in the team's
    data, URLs and endpoints it may reach). A submission whose config and overrides name no trackers
    (`configs.tracking_named`) gets the team's default tracking section, and one that names no benchmarks
    (`configs.benchmarks_named`) is also evaluated on its training data's test split; a whole RunConfig keeps its
    own. InvalidInput names each bad field: under `config` by dotted path, or `preset`, `name`, `tags`;
    QuotaExceeded (429) when the team is at its active-run quota."""
    require_role(user, team, Role.MEMBER)
    whole = isinstance(config, RunConfig)
    partial = None if isinstance(config, RunConfig) else config
    admission = config_admit(
        team=team,
        preset=preset,
        base=config,
        overrides=overrides,
        team_tracking=not (whole or tracking_named(config=partial, overrides=overrides)),
        default_benchmarks=not (whole or benchmarks_named(config=partial, overrides=overrides)),
    )
    return run_create(team=team, user=user, name=name, admission=admission, preset=preset, tags=tags)


def run_create(
    *,
    team: Team,
    user: User,
    name: str,
    admission: Admission,
    preset: str = "",
    tags: Sequence[str] = (),
    cloned_from: Run | None = None,
    experiment: Experiment | None = None,
    arm: str = "",
) -> Run:
    """Store an admitted config (`configs.config_admit`) as a queued run with the data versions it uses, and
    enqueue its training once committed; the config is not checked again. Submissions, clones and experiments'
    runs all end here. InvalidInput for a missing name or bad tags; QuotaExceeded (429) when the team is at its
    active-run quota, except that a run of an `experiment` then waits as pending (see
    `lifecycle.runs_start_pending`)."""
    require_role(user, team, Role.MEMBER)
    name = name.strip()
    if not name:
        raise InvalidInput({"name": ["give the run a name"]})
    tag_names = _clean_tags(tags)
    config = admission.config
    with transaction.atomic():
        waits = _active_runs_check(team, wait=experiment is not None)
        run = Run.objects.create(
            team=team,
            creator=user,
            name=name[:200],
            status=Run.Status.PENDING if waits else Run.Status.QUEUED,
            backend=config.backend.name,
            preset=preset,
            config=config.to_dict(),
            seed=config.seed,
            total_steps=config_total_steps(config),
            cloned_from=cloned_from,
            experiment=experiment,
            arm=arm[:64],
        )
        RunTag.objects.bulk_create([RunTag(run=run, name=tag) for tag in tag_names])
        run_data_record(run_id=run.pk, versions=admission.versions)
        if not waits:
            tasks.enqueue(run)
    return run


def run_cancel(*, run: Run, user: User) -> Run:
    """Pending and queued runs stop at once; running ones stop after the current step (the worker checks every
    step). A queued run that stops frees a slot for the team's pending runs."""
    require_role(user, run.team, Role.MEMBER)
    now = timezone.now()
    runs = Run.objects.filter(pk=run.pk)
    waiting = (Run.Status.PENDING, Run.Status.QUEUED)
    stopped = runs.filter(status__in=waiting).update(status=Run.Status.CANCELLED, finished_at=now)
    if not stopped and not runs.filter(status=Run.Status.RUNNING).update(status=Run.Status.CANCELLING):
        status = Run.objects.values_list("status", flat=True).get(pk=run.pk)
        if status not in (Run.Status.CANCELLING, Run.Status.CANCELLED):
            raise Conflict(f"the run is {status}; only pending, queued or running runs can be cancelled")
    if stopped:
        runs_start_pending(team_id=run.team_id)
    run.refresh_from_db()
    return run


def run_clone(
    *,
    run: Run,
    user: User,
    name: str | None = None,
    tags: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Run:
    """A new run of the same team with the source's config, changed by `overrides` (fields the source's config
    lacks take their defaults, as they did when it ran, not its preset's values), admitted once as a submission
    is; it keeps the source's trackers and benchmarks."""
    require_role(user, run.team, Role.MEMBER)
    admission = config_admit(team=run.team, base=run.config, overrides=overrides)
    return run_create(
        team=run.team,
        user=user,
        name=name or f"{run.name} (clone)",
        admission=admission,
        tags=list(tags) if tags is not None else selectors.run_tag_names(run=run),
        preset=run.preset,
        cloned_from=run,
    )


def run_resume(*, run: Run, user: User) -> Run:
    """Queue a failed or cancelled run again; its worker continues from the newest checkpoint still on disk."""
    require_role(user, run.team, Role.MEMBER)
    checkpoint = selectors.checkpoint_latest(run=run)
    if checkpoint is None:
        raise Conflict("the run has no checkpoint to resume from; clone it to start over")
    with transaction.atomic():
        if Run.objects.filter(pk=run.pk, status__in=Run.RESUMABLE).exists():
            _active_runs_check(run.team)
        changed = Run.objects.filter(pk=run.pk, status__in=Run.RESUMABLE).update(
            status=Run.Status.QUEUED,
            resume_checkpoint=checkpoint,
            error="",
            finished_at=None,
            queued_at=timezone.now(),
            enqueued_at=None,
        )
        if not changed:
            status = Run.objects.values_list("status", flat=True).get(pk=run.pk)
            raise Conflict(f"the run is {status}; only failed or cancelled runs can be resumed")
        run.refresh_from_db()
        tasks.enqueue(run)
    return run


def run_evaluate(
    *,
    run: Run,
    user: User,
    benchmarks: Sequence[str],
    checkpoint: Checkpoint | None = None,
    limit: int | None = None,
) -> EvaluationRequest:
    """Evaluate a checkpoint (default: the newest) with its best instruction on the given benchmarks."""
    require_role(user, run.team, Role.MEMBER)
    names = [name.strip() for name in benchmarks if name.strip()]
    if not names:
        raise InvalidInput({"benchmarks": ["name at least one benchmark"]})
    names = benchmark_paths(names, team=run.team)
    if checkpoint is None:
        checkpoint = selectors.checkpoint_latest(run=run)
        if checkpoint is None:
            raise Conflict("the run has no checkpoint yet")
    elif checkpoint.run_id != run.pk:
        raise InvalidInput({"checkpoint": ["not a checkpoint of this run"]})
    if not checkpoint.available:
        raise Gone(f"the checkpoint of step {checkpoint.step} was deleted (keep_last)")
    with transaction.atomic():
        request = EvaluationRequest.objects.create(
            run=run, checkpoint=checkpoint, requested_by=user, benchmarks=list(dict.fromkeys(names)), limit=limit
        )
        job_data_record(team=run.team, names=request.benchmarks, evaluation=request)
        tasks.enqueue(request)
    return request


STEERABLE = (Run.Status.QUEUED, Run.Status.RUNNING)
"""A run takes control requests while it is queued or running: the worker hands them to the engine."""


def control_request_create(
    *,
    run: Run,
    user: User,
    kind: str,
    text: str | None = None,
    verify: bool = True,
    instruction_id: str | None = None,
) -> ControlRequest:
    """Ask the run's engine to inject an instruction (`text`, verified unless `verify` is False), or to pin, unpin
    or retire `instruction_id`. It stays pending until the engine handles it before a step (applied or rejected
    with the reason); 409 unless the run is queued or running."""
    require_role(user, run.team, Role.MEMBER)
    payload = _control_payload(run, kind, text=text, verify=verify, instruction_id=instruction_id)
    with transaction.atomic():
        status = Run.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
        if status not in STEERABLE:
            raise Conflict(f"the run is {status}; only a queued or running run takes control requests")
        return ControlRequest.objects.create(
            run=run, kind=kind, payload=payload, author=user, author_name=user.get_username()
        )


def _control_payload(
    run: Run, kind: str, *, text: str | None, verify: bool, instruction_id: str | None
) -> dict[str, Any]:
    """What the engine needs for `kind`, checked: InvalidInput names the field."""
    if kind == ControlRequest.Kind.INJECT:
        cleaned = (text or "").strip()
        if not cleaned:
            raise InvalidInput({"text": ["write the instruction to inject"]})
        if len(cleaned) > MAX_INSTRUCTION_CHARS or "\x00" in cleaned:
            raise InvalidInput({"text": [f"at most {MAX_INSTRUCTION_CHARS} characters, no NUL"]})
        return {"text": cleaned, "verify": bool(verify)}
    if kind not in ControlRequest.Kind.values:
        raise InvalidInput({"kind": [f"one of {', '.join(ControlRequest.Kind.values)}"]})
    if not instruction_id or not Instruction.objects.filter(run=run, key=instruction_id).exists():
        raise InvalidInput({"instruction_id": [f"no instruction {instruction_id!r} in this run"]})
    return {"instruction_id": instruction_id}


def alarm_acknowledge(*, run: Run, user: User, alarm: PopulationAlarm) -> PopulationAlarm:
    """A member marks a collapse alarm of the run as seen: the run page no longer shows its banner, and the timeline
    notes who did. The first acknowledgement stays; acknowledging again changes nothing."""
    require_role(user, run.team, Role.MEMBER)
    if alarm.run_id != run.pk:
        raise InvalidInput({"alarm": ["not an alarm of this run"]})
    now = timezone.now()
    with transaction.atomic():
        if PopulationAlarm.objects.filter(pk=alarm.pk, acknowledged_at__isnull=True).update(
            acknowledged_by=user, acknowledged_at=now
        ):
            RunNote.objects.create(
                run=run,
                step=alarm.step,
                kind="alarm_acknowledged",
                payload={"alarm": alarm.pk, "by": user.username},
                time=now,
            )
    alarm.refresh_from_db()
    return alarm


def instruction_export(*, run: Run, user: User) -> dict[str, Any]:
    """The whole population with lineage, critiques and weights, plus the run's config, as one JSON document."""
    require_role(user, run.team, Role.VIEWER)
    lineage = selectors.run_lineage(run=run)
    best = selectors.best_instruction(run=run)
    return {
        "run": {"id": str(run.pk), "name": run.name, "status": run.status, "step": run.step},
        "config": run.config,
        "best_instruction_id": best["id"] if best else None,
        "instructions": lineage["nodes"],
        "edges": lineage["edges"],
        "rounds": lineage["rounds"],
        "population_history": selectors.run_population_history(run=run),
    }


def team_tracking_set(*, team: Team, user: User, tracking: Mapping[str, Any] | None) -> dict[str, Any]:
    """Set the team's default trackers: the tracking section that its runs get when they name none
    (docs/tracking.md). Owners only. The section is checked as a run's is at submission (the engine's rules, the
    trackers' packages, the team's stored keys it names, the MLflow server's host) and stored whole, every field
    included; None or {} removes the default. Each run that gets it is checked again when it is submitted, and its
    worker checks the MLflow URL once more. InvalidInput keyed `tracking.<field>`."""
    require_role(user, team, Role.OWNER)
    stored: dict[str, Any] = {}
    if tracking:
        config = RunConfig(tracking=tracking_section(tracking))
        errors = url_errors(config, net_policy()) | tracking_errors(config, team)
        if errors:
            raise InvalidInput(errors)
        stored = dataclasses.asdict(config.tracking)
    Team.objects.filter(pk=team.pk).update(tracking_default=stored)
    team.tracking_default = stored
    return stored
