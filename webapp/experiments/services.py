"""Operations on experiments — submit, cancel — shared by pages and the API. An experiment is read and checked by
the engine (`experiment_from_dict`); each run's config is then admitted once, as a run submission's is
(`config_admit`: confinement to the team's data, what a run may reach), and its runs are stored through the runs
service (`run_create`), where those beyond the team's quota wait as pending."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from inspo_engine.config import resolve_key
from inspo_engine.config_fields import ConfigError
from inspo_engine.experiments import EXPERIMENT_FIELDS, arm_config, experiment_from_dict
from inspo_engine.experiments import Experiment as EngineExperiment
from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import Conflict, InvalidInput
from webapp.data.references import is_reference
from webapp.runs.configs import Admission, config_admit, tracking_named
from webapp.runs.models import Run
from webapp.runs.services import experiment_pending_check, run_cancel, run_create

from .estimates import estimate_for_experiment
from .models import Experiment, runs_over_limit

BENCHMARK, BENCHMARKS = "evaluation.benchmark", "evaluation.benchmarks"


def experiment_errors(error: ConfigError) -> InvalidInput:
    """The engine's errors keyed by the dotted path of the bad field (`seeds`, `arms.mine.grpo.lr`, …)."""
    errors: dict[str, list[str]] = {}
    for item in error.errors:
        errors.setdefault(item.field or "experiment", []).append(item.message)
    return InvalidInput(errors)


def experiment_read(spec: Mapping[str, Any]) -> EngineExperiment:
    """The engine's experiment from what a user sent: InvalidInput naming each bad field, and the platform's bound
    on the number of runs."""
    try:
        experiment = experiment_from_dict(dict(spec))
    except ConfigError as error:
        raise experiment_errors(error) from error
    message = runs_over_limit(len(experiment.arms) * len(experiment.seeds))
    if message:
        raise InvalidInput({"seeds": [message]})
    return experiment


def _set_by(overrides: Mapping[str, Any], field: str) -> bool:
    """Whether these overrides set the config field (named by its dotted path or its paper name)."""
    for key in overrides:
        try:
            if resolve_key(str(key)) == field:
                return True
        except ConfigError:
            continue
    return False


def experiment_configs(experiment: EngineExperiment, *, team: Team) -> dict[tuple[str, int], Admission]:
    """Each run's config admitted once, as a run submission's is (`config_admit`: the team's data, what a run may
    reach, the optimizer calls of the experiment's earlier runs counted against an endpoint's daily budget);
    InvalidInput naming the field where it was set — `overrides.<field>` or `arms.<arm>.<field>`, the experiment's
    own field (`evaluation.benchmarks`) for one it sets, or `tracking.…` for the team's default trackers —
    otherwise. An arm whose overrides and the experiment's name no trackers gets the team's default, as a run
    submitted alone does."""
    configs: dict[tuple[str, int], Admission] = {}
    errors: dict[str, list[str]] = {}
    reserved: dict[str, int] = {}
    for arm, seed in experiment.runs():
        chosen = tracking_named(overrides=experiment.overrides) or tracking_named(overrides=experiment.arms[arm])
        try:
            admission = config_admit(
                team=team, base=arm_config(experiment, arm, seed), team_tracking=not chosen, reserved=reserved
            )
        except InvalidInput as error:
            for field, messages in error.errors.items():
                shared = _set_by(experiment.overrides, field) and not _set_by(experiment.arms[arm], field)
                where = f"overrides.{field}" if shared else f"arms.{arm}.{field}"
                if not chosen and field.startswith("tracking."):
                    where = field
                where = EXPERIMENT_FIELDS.get(field, where)
                errors.setdefault(where, [])
                errors[where] += [m for m in messages if m not in errors[where]]
            continue
        configs[(arm, seed)] = admission
        endpoint = admission.config.optimizer.endpoint
        if endpoint:
            reserved[endpoint] = reserved.get(endpoint, 0) + admission.config.optimizer.max_calls
    if errors:
        raise InvalidInput(errors)
    return configs


def _named_as_sent(error: InvalidInput, spec: Mapping[str, Any]) -> InvalidInput:
    """The errors of `evaluation.benchmarks` under `evaluation.benchmark` for an experiment that named its one
    benchmark so."""
    evaluation = spec.get("evaluation")
    if not isinstance(evaluation, Mapping) or "benchmark" not in evaluation:
        return error
    return InvalidInput({BENCHMARK if f == BENCHMARKS else f: m for f, m in error.errors.items()})


def _pinned(evaluation: dict[str, Any], configs: Mapping[tuple[str, int], Admission]) -> dict[str, Any]:
    """The evaluation with each data reference among its benchmarks as its runs' configs pin it (`data:x` →
    `data:x@2`), so the experiment names its benchmarks as its runs do."""
    if not configs:
        return evaluation
    pinned = list(next(iter(configs.values())).config.eval.benchmarks)
    named = list(evaluation.get("benchmarks") or [])
    if len(pinned) == len(named):
        evaluation["benchmarks"] = [
            p if is_reference(n) and is_reference(p) else n for n, p in zip(named, pinned, strict=True)
        ]
    return evaluation


def experiment_submit(*, team: Team, user: User, name: str, spec: Mapping[str, Any]) -> Experiment:
    """Check the experiment and every run's config, store it, and submit its runs (arm by arm, seed by seed): as
    many as the team's quota allows are queued, the rest wait as pending and start as slots free."""
    require_role(user, team, Role.MEMBER)
    name = name.strip()
    if not name:
        raise InvalidInput({"name": ["give the experiment a name"]})
    experiment = experiment_read(spec)
    try:
        configs = experiment_configs(experiment, team=team)
    except InvalidInput as error:
        raise _named_as_sent(error, spec) from error
    evaluation = _pinned(dataclasses.asdict(experiment.evaluation), configs)
    spec_read = {"preset": experiment.preset, "overrides": experiment.overrides, "evaluation": evaluation}
    estimate = estimate_for_experiment(spec_read, team=team, runs=len(configs))
    with transaction.atomic():
        experiment_pending_check(team, runs=len(configs))
        row = Experiment.objects.create(
            team=team,
            created_by=user,
            name=name[:200],
            preset=experiment.preset,
            overrides=dict(experiment.overrides),
            arms=[[arm, dict(overrides)] for arm, overrides in experiment.arms.items()],
            seeds=list(experiment.seeds),
            evaluation=evaluation,
            baseline=experiment.baseline,
            estimate=estimate.to_dict(),
        )
        for (arm, seed), admission in configs.items():  # seed by seed: pending runs start whole seeds first
            run_create(
                team=team,
                user=user,
                name=f"{row.name} · {arm} · seed {seed}",
                admission=admission,
                preset=experiment.preset,
                experiment=row,
                arm=arm,
            )
    return row


def experiment_cancel(*, experiment: Experiment, user: User) -> Experiment:
    """Cancel every run of the experiment that has not ended (pending and queued ones at once, running ones after
    their step), and mark it cancelled."""
    require_role(user, experiment.team, Role.MEMBER)
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.CANCELLED)
    runs = Run.objects.filter(experiment=experiment)
    runs.filter(status=Run.Status.PENDING).update(status=Run.Status.CANCELLED, finished_at=timezone.now())
    for run in runs.filter(status__in=(Run.Status.QUEUED, Run.Status.RUNNING)):
        with contextlib.suppress(Conflict):  # it ended meanwhile
            run_cancel(run=run, user=user)
    experiment.refresh_from_db()
    return experiment
