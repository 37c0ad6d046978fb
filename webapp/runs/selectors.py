"""Reads for pages and the API: runs visible to a user, and a run's series, population history, lineage,
evaluations, trajectories and checkpoints shaped for charts. Functions taking `run` expect one from `run_get`."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

from django.conf import settings
from django.contrib.postgres.aggregates import StringAgg
from django.core.cache import cache
from django.db.models import Avg, Count, Max, QuerySet
from django.db.models.functions import MD5
from django.http import Http404

from inspo_engine.config import PopulationConfig
from inspo_engine.env.rewards import exact_match
from webapp.accounts.models import Team
from webapp.accounts.permissions import AnyUser
from webapp.core.errors import InvalidInput
from webapp.core.responses import CACHED_JSON_S
from webapp.core.text import words_that_differ

from .configs import PRESET_NAMES, config_compose, team_tracking_default, tracking_section
from .models import (
    Checkpoint,
    ControlRequest,
    DiversityRecord,
    Evaluation,
    EvaluationAnswer,
    EvaluationRequest,
    EvolutionRound,
    Heatmap,
    HeatmapCell,
    Instruction,
    PopulationAlarm,
    PopulationMember,
    PopulationSnapshot,
    Run,
    RunNote,
    StepMetric,
    Trajectory,
)

SERIES_FIELDS = (
    "reward_mean",
    "reward_std",
    "tool_calls_mean",
    "response_length_mean",
    "instruction_length_mean",
    "kl",
    "entropy",
    "clip_fraction",
    "lr",
    "grad_norm",
    "pg_loss",
)

RUN_ORDERINGS = ("created_at", "-created_at", "name", "-name", "status", "-status", "step", "-step")
COMPARE_SERIES = ("reward_mean", "tool_calls_mean", "response_length_mean", "instruction_length_mean")
OUTCOME_SERIES = ("em", "well_formed", "reward_format", "reward_correct")
"""Per step, from the engine's step metrics: the share of exact-match answers, of well-formed replies, and the mean
reward's format and correctness parts (null at steps recorded before the engine kept them)."""

MAX_COMPARED_RUNS = 12
BENCHMARK_METRICS = ("em", "f1")
"""The metrics stored per benchmark: training evaluations store em, requested evaluations em and f1."""


def team_runs(*, user: AnyUser) -> QuerySet[Run]:
    """Every run of the user's teams, rows alone and unordered: the one rule of who sees a run, which every read of
    runs starts from (none for an anonymous user)."""
    if not user.is_authenticated:
        return Run.objects.none()
    return Run.objects.filter(team__memberships__user=user).order_by()


def run_list(
    *,
    user: AnyUser,
    status: str | None = None,
    tag: str | None = None,
    creator: str | None = None,
    team: str | None = None,
    preset: str | None = None,
    ordering: str | None = None,
) -> QuerySet[Run]:
    """Runs of the user's teams, newest first unless `ordering` (one of RUN_ORDERINGS) says otherwise; filters by
    status, tag, creator's username, team slug and preset."""
    runs = team_runs(user=user)
    if status:
        runs = runs.filter(status=status)
    if tag:
        runs = runs.filter(tags__name=tag)
    if creator:
        runs = runs.filter(creator__username=creator)
    if team:
        runs = runs.filter(team__slug=team)
    if preset:
        runs = runs.filter(preset=preset)
    order = ordering if ordering in RUN_ORDERINGS else "-created_at"
    return (
        runs.select_related("team", "creator", "best_instruction")
        .prefetch_related("tags")
        .order_by(order, "-created_at", "pk")
    )


def run_get(*, user: AnyUser, run_id: UUID | str, related: bool = True) -> Run:
    """One run of the user's teams; 404 for runs of other teams, as for runs that do not exist. With `related`
    False, its row alone, without its team, creator, best instruction and tags: what a read of the run's series
    needs, in one lighter query instead of two (building the query is most of what a cached read costs)."""
    runs = run_list(user=user) if related else team_runs(user=user)
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    return run


def run_tag_names(*, run: Run) -> list[str]:
    return sorted(tag.name for tag in run.tags.all())


def checkpoint_list(*, run: Run) -> QuerySet[Checkpoint]:
    return run.checkpoints.order_by("step")


def run_directory(*, run_id: UUID | str) -> Path:
    """Where a run's files are: its checkpoints, events and the engine's own files."""
    return Path(settings.INSPO_RUNS_DIR) / str(run_id)


def checkpoint_get(*, run: Run, checkpoint_id: int) -> Checkpoint:
    checkpoint = run.checkpoints.filter(pk=checkpoint_id).first()
    if checkpoint is None:
        raise Http404("no such checkpoint")
    return checkpoint


def checkpoint_latest(*, run: Run) -> Checkpoint | None:
    return run.checkpoints.filter(available=True).order_by("-step").first()


def evaluation_request_list(*, run: Run) -> QuerySet[EvaluationRequest]:
    return run.evaluation_requests.select_related("checkpoint").order_by("-created_at")


def _step_columns(run: Run, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """These StepMetric fields of the run as columns, one value per stored step in step order."""
    rows = StepMetric.objects.filter(run=run).order_by("step").values_list(*names)
    columns = list(zip(*rows, strict=True)) or [() for _ in names]
    return {name: list(column) for name, column in zip(names, columns, strict=True)}


def run_metric_series(*, run: Run) -> dict[str, Any]:
    """Column-wise series, one value per stored step: `{"step": [...], "reward_mean": [...], "timings": {...}}`."""
    series: dict[str, Any] = _step_columns(run, ("step", "phase", *SERIES_FIELDS, "timings", "metrics"))
    metrics: list[dict[str, float]] = series.pop("metrics")
    series.update({name: [step.get(name) for step in metrics] for name in OUTCOME_SERIES})
    timings: list[dict[str, float]] = series.pop("timings")
    timing_names = sorted({name for step in timings for name in step})
    series["timings"] = {name: [step.get(name) for step in timings] for name in timing_names}
    return series


def run_population_history(*, run: Run) -> list[dict[str, Any]]:
    """Every population snapshot in order, each member with weight, sampling probability, samples, mean reward."""
    keys = dict(Instruction.objects.filter(run=run).values_list("pk", "key"))
    members: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = (
        PopulationMember.objects.filter(snapshot__run=run)
        .order_by("snapshot_id", "-weight", "instruction_id")
        .values_list("snapshot_id", "instruction_id", "weight", "probability", "samples", "mean_reward")
    )
    for snapshot_id, instruction_id, weight, probability, samples, mean_reward in rows:
        members[snapshot_id].append(
            {
                "id": keys.get(instruction_id),
                "weight": weight,
                "probability": probability,
                "samples": samples,
                "mean_reward": mean_reward,
            }
        )
    snapshots = PopulationSnapshot.objects.filter(run=run).order_by("step", "id")
    return [
        {"step": step, "reason": reason, "best_id": keys.get(best_id), "time": time, "members": members[pk]}
        for pk, step, reason, best_id, time in snapshots.values_list("id", "step", "reason", "best_id", "time")
    ]


POPULATION_FIELDS = (
    "weight",
    "probability",
    "samples",
    "mean_reward",
    "recent_reward",
    "recent_low",
    "recent_high",
    "recent_samples",
)


T = TypeVar("T")

CACHE_VERSION = 2
"""Part of every cache key (and so of every ETag derived from one): raise it when an answer's shape changes, so that
no entry written by the code before is served by the code after."""


def run_cache_key(*, run: Run, name: str) -> str | None:
    """A cache key for `name` (a kind of data) of a run that no longer changes; None while the run is active. The
    key holds what changes when the run does again (status, last step, attempt, finish time): a resumed run moves
    on to new keys, and a deleted run's entries are unreachable (its id 404s first) until they expire."""
    if run.is_active:
        return None
    finished = run.finished_at.isoformat() if run.finished_at else "-"
    return f"runs:v{CACHE_VERSION}:{name}:{run.pk}:{run.status}:{run.step}:{run.attempts}:{finished}"


def run_settled(*, run: Run, name: str, build: Callable[[], T]) -> T:
    """`build()`, kept in the cache under `run_cache_key` once the run is settled (built every time while it is
    active): for what a settled run's page reads on every visit but cannot change."""
    key = run_cache_key(run=run, name=name)
    if key is None:
        return build()
    value = cache.get(key, _MISSING)
    if value is _MISSING:
        value = build()
        cache.set(key, value, CACHED_JSON_S)
    return cast(T, value)


_MISSING = object()


def run_population_columns(*, run: Run) -> dict[str, Any]:
    """The population history column-wise, as the dashboards draw it: `snapshots` holds one array per snapshot
    field (step, reason, best_id, time), in step order; `instructions` one entry per instruction that was ever a
    member, in order of first membership, whose arrays (`POPULATION_FIELDS`) run over the snapshots from index
    `start` to its last membership, null where it was not a member in between."""
    snapshots = list(
        PopulationSnapshot.objects.filter(run=run)
        .order_by("step", "id")
        .values_list("id", "step", "reason", "best_id", "time")
    )
    index = {pk: i for i, (pk, *_) in enumerate(snapshots)}
    keys = dict(Instruction.objects.filter(run=run).order_by().values_list("pk", "key"))
    members: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    rows = (
        PopulationMember.objects.filter(snapshot__run=run)
        .order_by()  # placed by snapshot index below; the default ordering would sort through the run
        .values_list("snapshot_id", "instruction_id", *POPULATION_FIELDS)
    )
    for snapshot_id, instruction_id, *values in rows:
        members[keys[instruction_id]].append((index[snapshot_id], *values))
    instructions: list[dict[str, Any]] = []
    for key, stats in members.items():
        stats.sort(key=lambda row: row[0])
        start = stats[0][0]
        columns: list[list[Any]] = [[None] * (stats[-1][0] - start + 1) for _ in POPULATION_FIELDS]
        for position, *values in stats:
            for column, value in zip(columns, values, strict=True):
                column[position - start] = value
        instructions.append({"id": key, "start": start, **dict(zip(POPULATION_FIELDS, columns, strict=True))})
    # First membership first; among those that joined together, the heavier first (the order the stacked chart uses).
    instructions.sort(key=lambda entry: (entry["start"], -entry["weight"][0], entry["id"]))
    return {
        "snapshots": {
            "step": [step for _, step, _, _, _ in snapshots],
            "reason": [reason for _, _, reason, _, _ in snapshots],
            "best_id": [keys.get(best) if best else None for _, _, _, best, _ in snapshots],
            "time": [time for _, _, _, _, time in snapshots],
        },
        "instructions": instructions,
    }


def _instruction_node(
    ins: Instruction, keys: dict[int, str], pinned: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    return {
        "id": ins.key,
        "text": ins.text,
        "origin": ins.origin,
        "author": ins.author or None,
        "pinned": ins.key in pinned,
        "parent_id": keys.get(ins.parent_id) if ins.parent_id else None,
        "birth_step": ins.birth_step,
        "verify_score": ins.verify_score,
        "round_id": ins.round.key if ins.round else None,
        "critique": ins.round.critique if ins.round else None,
        "retired_step": ins.retired_step,
        "retired_reason": ins.retired_reason or None,
    }


def _round_dict(r: EvolutionRound, keys: dict[int, str]) -> dict[str, Any]:
    return {
        "id": r.key,
        "step": r.step,
        "round": r.number,
        "proposer": r.proposer,
        "parent_id": keys.get(r.parent_id) if r.parent_id else None,
        "critique": r.critique,
        "failures": r.failures,
        "optimizer_model": r.optimizer_model,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cost_usd": float(r.cost_usd) if r.cost_usd is not None else None,
        "parent_score": r.parent_score,
        "n_questions": r.n_questions,
        "candidates": [
            {
                "text": c.text,
                "valid": c.valid,
                "score": c.score,
                "accepted": c.accepted,
                "reason": c.reason or None,
                "instruction_id": keys.get(c.instruction_id) if c.instruction_id else None,
            }
            for c in r.candidates.all()
        ],
    }


def run_lineage(*, run: Run) -> dict[str, Any]:
    """The lineage graph: instructions as nodes, parent → child edges, and every optimizer round with its
    critique, the failures it was shown and each candidate's verdict."""
    instructions = list(
        Instruction.objects.filter(run=run)
        .select_related("round")
        .defer("round__failures")
        .order_by("birth_step", "id")
    )
    keys = {ins.pk: ins.key for ins in instructions}
    rounds = EvolutionRound.objects.filter(run=run).order_by("step", "id").prefetch_related("candidates")
    pinned = run_pinned_keys(run=run)
    return {
        "nodes": [_instruction_node(ins, keys, pinned) for ins in instructions],
        "edges": [{"source": keys[i.parent_id], "target": i.key} for i in instructions if i.parent_id in keys],
        "rounds": [_round_dict(r, keys) for r in rounds],
    }


def run_evaluations(*, run: Run) -> dict[str, Any]:
    """Every evaluation result, and a table of the newest value per benchmark and metric."""
    rows: list[dict[str, Any]] = [
        {
            "step": e.step,
            "benchmark": e.benchmark,
            "metric": e.metric,
            "value": e.value,
            "n": e.n,
            "instruction_id": e.instruction.key if e.instruction else None,
            "checkpoint_step": e.checkpoint.step if e.checkpoint else None,
            "source": "requested" if e.request_id else "training",
        }
        for e in run.evaluations.select_related("instruction", "checkpoint").order_by("benchmark", "step", "id")
    ]
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        table[row["benchmark"]][row["metric"]] = row["value"]
    return {"results": rows, "table": dict(table)}


def run_trajectories(*, run: Run, step: int | None = None) -> dict[str, Any]:
    """The sampled trajectories of one step (default: the newest step that has any)."""
    if step is None:
        step = Trajectory.objects.filter(run=run).order_by("-step").values_list("step", flat=True).first()
    if step is None:
        return {"step": None, "trajectories": []}
    rows = Trajectory.objects.filter(run=run, step=step).select_related("instruction").order_by("id")
    return {
        "step": step,
        "trajectories": [
            {
                "instruction_id": t.instruction.key if t.instruction else None,
                "question": t.question,
                "golden_answers": t.golden_answers,
                "response": t.response,
                "answer": t.answer,
                "reward": t.reward,
                "correct": bool(exact_match(t.answer, t.golden_answers or [])),
                "tool_calls": t.tool_calls,
                "response_tokens": t.response_tokens,
                "error": t.error or None,
            }
            for t in rows
        ],
    }


# -- steering: control requests ----------------------------------------------------------------------------------


def control_request_rows(*, run: Run) -> list[dict[str, Any]]:
    """The run's control requests, newest first, each as the API sends it."""
    return [control_request_row(r) for r in run.control_requests.order_by("-id")]


def control_request_row(request: ControlRequest) -> dict[str, Any]:
    payload = request.payload
    return {
        "id": request.pk,
        "kind": request.kind,
        "text": payload.get("text"),
        "verify": payload.get("verify") if request.kind == ControlRequest.Kind.INJECT else None,
        "instruction_id": request.instruction_key or payload.get("instruction_id"),
        "author": request.author_name,
        "created_at": request.created_at,
        "status": request.status,
        "outcome": request.outcome,
        "applied_at_step": request.applied_at_step,
    }


def control_requests_pending(*, run_id: UUID | str) -> QuerySet[ControlRequest]:
    """What the worker hands the engine, oldest first: every request not handled yet (a resume's rewind makes
    those handled after its checkpoint pending again, keeping the step to replay them before)."""
    return ControlRequest.objects.filter(run_id=run_id, status=ControlRequest.Status.PENDING).order_by("id")


def run_pinned_keys(*, run: Run) -> set[str]:
    """The instructions pinned now: those whose last applied pin or unpin was a pin."""
    applied = run.control_requests.filter(
        status=ControlRequest.Status.APPLIED, kind__in=(ControlRequest.Kind.PIN, ControlRequest.Kind.UNPIN)
    ).order_by("applied_at_step", "id")
    last = {r.instruction_key: r.kind for r in applied}
    return {key for key, kind in last.items() if kind == ControlRequest.Kind.PIN}


def run_living_instructions(*, run: Run) -> list[dict[str, Any]]:
    """The population as the database holds it: the instructions not retired, oldest first, with whether each is
    pinned and the words that set it apart from its parent (or from the seed instruction), which is what the run
    page's steering section lists."""
    pinned = run_pinned_keys(run=run)
    living = run.instructions.filter(retired_step__isnull=True).select_related("parent").order_by("birth_step", "id")
    seed = (run.config or {}).get("population", {}).get("seed_instruction")
    rows = []
    for i in living:
        reference = i.parent.text if i.parent else (seed if seed != i.text else None)
        differs = words_that_differ(i.text, reference)
        rows.append(
            {"id": i.key, "text": i.text, "origin": i.origin, "author": i.author, "pinned": i.key in pinned}
            | {"differs": differs, "from": "its parent" if i.parent else ("the seed" if reference else None)}
        )
    return rows


# -- population diversity and its collapse alarms -------------------------------------------------------------------

DIVERSITY_COLUMNS = (
    "step",
    "reason",
    "size",
    "cosine_mean",
    "cosine_min",
    "cosine_max",
    "jaccard_mean",
    "strategies",
    "entropy",
    "entropy_normalised",
)
DIVERSITY_SETTINGS = ("diversity", "strategy_cosine", "collapse_cosine", "collapse_entropy", "collapse_steps")
"""The population fields of a run's config that say how diversity is measured and when the alarm trips."""


def run_diversity(*, run: Run) -> dict[str, Any]:
    """Every diversity record of the run column-wise (one value per record, in step order; several records may share
    a step), the config's thresholds, every collapse alarm, and the one active now (None: not collapsed)."""
    rows = DiversityRecord.objects.filter(run=run).order_by("step", "id").values_list(*DIVERSITY_COLUMNS)
    columns = list(zip(*rows, strict=True)) or [() for _ in DIVERSITY_COLUMNS]
    alarms = [alarm_row(a) for a in run.alarms.select_related("acknowledged_by").order_by("step", "id")]
    return {
        "series": {name: list(column) for name, column in zip(DIVERSITY_COLUMNS, columns, strict=True)},
        "settings": diversity_settings(run.config),
        "alarms": alarms,
        "collapsed": next((a for a in reversed(alarms) if a["active"]), None),
    }


def diversity_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """How the run measures diversity: its config's values, the engine's defaults where a stored config predates
    a field."""
    defaults, stored = PopulationConfig(), config.get("population") or {}
    return {name: stored.get(name, getattr(defaults, name)) for name in DIVERSITY_SETTINGS}


def alarm_row(alarm: PopulationAlarm) -> dict[str, Any]:
    return {
        "id": alarm.pk,
        "step": alarm.step,
        "since_step": alarm.since_step,
        "reasons": list(alarm.reasons),
        "cosine_min": alarm.cosine_min,
        "entropy_normalised": alarm.entropy_normalised,
        "collapse_cosine": alarm.collapse_cosine,
        "collapse_entropy": alarm.collapse_entropy,
        "cleared_step": alarm.cleared_step,
        "active": alarm.active,
        "acknowledged_by": alarm.acknowledged_by.username if alarm.acknowledged_by else None,
        "acknowledged_at": alarm.acknowledged_at,
        "time": alarm.time,
    }


def alarm_get(*, run: Run, alarm_id: int) -> PopulationAlarm:
    alarm = run.alarms.filter(pk=alarm_id).first()
    if alarm is None:
        raise Http404("no such alarm")
    return alarm


def run_notes(*, run: Run) -> QuerySet[RunNote]:
    return run.notes.order_by("time", "id")


def _last_weight(run: Run, instruction: Instruction) -> float | None:
    member = (
        PopulationMember.objects.filter(snapshot__run=run, instruction=instruction)
        .order_by("-snapshot__step", "-snapshot_id")
        .values_list("weight", flat=True)
        .first()
    )
    return member if member is not None else instruction.retired_weight


def best_instruction(*, run: Run) -> dict[str, Any] | None:
    """The run's best instruction with its weight and its lineage back to the seed (each ancestor with the
    critique that produced its child)."""
    best = run.best_instruction
    if best is None:
        return None
    chain: list[Instruction] = []
    node: Instruction | None = best
    seen: set[int] = set()
    while node is not None and node.pk not in seen:
        seen.add(node.pk)
        chain.append(node)
        node = Instruction.objects.select_related("round").filter(pk=node.parent_id).first() if node.parent_id else None
    keys = {ins.pk: ins.key for ins in chain}
    pinned = run_pinned_keys(run=run)
    return {
        "id": best.key,
        "text": best.text,
        "origin": best.origin,
        "birth_step": best.birth_step,
        "weight": _last_weight(run, best),
        "verify_score": best.verify_score,
        "lineage": [_instruction_node(ins, keys, pinned) for ins in chain],
    }


# -- comparing runs ----------------------------------------------------------------------------------------------


def runs_get(*, user: AnyUser, run_ids: list[UUID]) -> list[Run]:
    """Several runs of the user's teams in the order asked, with their tags (what a comparison reads: not their
    team, creator or best instruction, which would only widen the query); 404 if any is missing or another team's."""
    wanted = list(dict.fromkeys(run_ids))
    found = {run.pk: run for run in team_runs(user=user).filter(pk__in=wanted).prefetch_related("tags")}
    if len(found) != len(wanted):
        raise Http404("no such run")
    return [found[pk] for pk in wanted]


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted field names of a nested config: `{"grpo": {"lr": 1e-6}}` → `{"grpo.lr": 1e-6}`."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_diff(configs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The fields whose values are not the same in every one of the labelled configs, in field order: per field its
    value in each config, under the config's label (a run's id, `preset`); a field a config lacks is None."""
    flat = {label: _flatten(dict(config)) for label, config in configs.items()}
    fields = sorted({name for values in flat.values() for name in values})
    diff = []
    for name in fields:
        values = {label: config.get(name) for label, config in flat.items()}
        if len({_content(v) for v in values.values()}) > 1:
            diff.append({"field": name, "values": values})
    return diff


def _content(value: Any) -> Any:
    """What a config value is, comparable with another's: a plain value with its type (1, 1.0 and True differ, as in
    JSON), a list or a dict as its JSON with sorted keys (by content, in any key order)."""
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return (type(value), value)


@functools.cache
def _preset_config(name: str) -> dict[str, Any]:
    """A preset's whole config, composed once per process: presets are code."""
    return config_compose(preset=name).to_dict()


def run_preset_diff(*, run: Run) -> list[dict[str, Any]] | None:
    """What the run's config changed from its preset's (see `config_diff`, labelled `preset` and `run`); None when
    the run names no preset this version knows."""
    if run.preset not in PRESET_NAMES:
        return None
    return config_diff({"preset": _preset_config(run.preset), "run": run.config})


def benchmark_table(runs: list[Run], *, metric: str) -> dict[str, Any]:
    """Table 1 of the paper for these runs (see `_compare_table`)."""
    return _compare_table(runs, metric=metric)[0]


def _compare_table(
    runs: list[Run], *, metric: str, versions: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """Table 1 of the paper for these runs: rows are runs, columns the benchmarks any of them was evaluated on,
    each cell the run's newest evaluation's `metric` (see `newest_evaluations`); `average` ("Avg.") is the unweighted
    mean over the table's columns, given only for a run with a value in every column (an average over other
    benchmarks is no Table-1 number); `best` lists per column the runs with its highest value (see `column_best`),
    leaving out columns where no run is ahead of another. Each row also says the step and the questions (n) of every
    value, and `questions` says per column whether its runs were scored on the same questions (`question_sets`).
    Also returns the cells behind the values (run id → column → cell, with its `evaluation_id` and `digest`)."""
    scored = {
        run_id: {name: cell for name, cell in cells.items() if cell[metric] is not None}
        for run_id, cells in _newest_cells(runs, versions).items()
    }
    values = {run_id: {name: cell[metric] for name, cell in cells.items()} for run_id, cells in scored.items()}
    columns = sorted({benchmark for by_name in values.values() for benchmark in by_name})
    cells: dict[str, dict[str, float]] = {}  # column → run id → value
    table: list[dict[str, Any]] = []
    for run in runs:
        run_id = str(run.pk)
        row_values = values.get(run_id, {})
        complete = bool(columns) and all(column in row_values for column in columns)
        average = sum(row_values.values()) / len(row_values) if complete else None
        found = scored.get(run_id, {})
        table.append(
            {
                "run_id": run_id,
                "values": row_values,
                "average": average,
                "steps": {name: found[name]["step"] for name in row_values},
                "n": {name: found[name]["n"] for name in row_values},
            }
        )
        by_score = {**row_values, "average": average} if average is not None else row_values
        for column, score in by_score.items():
            cells.setdefault(column, {})[run_id] = score
    best = {column: tied for column, by_run in cells.items() if (tied := column_best(by_run))}
    questions = {
        column: question_sets([found[column] for found in scored.values() if column in found]) for column in columns
    }
    return {"metric": metric, "columns": columns, "rows": table, "best": best, "questions": questions}, scored


def newest_evaluations(
    runs: list[Run],
    *,
    step: int | None = None,
    exclude: Mapping[str, frozenset[str]] | None = None,
    ids: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """run id → benchmark → the run's newest evaluation of it (by step, then as stored; at `step` when given):
    `em` and `f1` from its per-question rows when it kept them (`per_question`, and `n` counts them), else the numbers
    stored with it (None for a metric it did not store); `step`, `n`, and `source` (training or requested). A run
    that finished has evaluated every benchmark of its config last, so these are its final evaluation (with `ids`,
    each names it: `evaluation_id`, its em row's). With `exclude` (benchmark → question ids), a benchmark's
    per-question means leave those questions out and `excluded` says how many were (None where the evaluation kept
    no per-question results, so nothing could be)."""
    rows = Evaluation.objects.filter(run__in=runs, metric__in=BENCHMARK_METRICS)
    if step is not None:
        rows = rows.filter(step=step)
    annotated = rows.annotate(answered=Count("answers"), mean_em=Avg("answers__em"), mean_f1=Avg("answers__f1"))
    fields = ("run_id", "benchmark", "step", "request_id", "metric", "value", "n", "answered", "mean_em", "mean_f1")
    newest: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (
        evaluation_id,
        run_id,
        benchmark,
        at,
        request,
        metric,
        value,
        n,
        answered,
        mean_em,
        mean_f1,
    ) in annotated.order_by("run_id", "benchmark", "step", "id").values_list("id", *fields):
        cell = newest[str(run_id)].get(benchmark)
        if metric == "em" or cell is None or not _joins(cell, at, request):  # an em row starts an evaluation
            cell = {"benchmark": benchmark, "step": at, "em": None, "f1": None, "n": n, "per_question": False}
            cell |= {"source": "requested" if request else "training", "_request": request, "_f1_row": False}
            cell["_id"] = evaluation_id
            newest[str(run_id)][benchmark] = cell
        if metric == "em" and answered:
            cell |= {"em": mean_em, "f1": mean_f1, "n": answered, "per_question": True}
        elif metric == "f1":
            cell |= {"f1": cell["f1"] if cell["per_question"] else value, "_f1_row": True}
        else:
            cell["em"] = value
    if exclude is not None:
        _leave_out(newest, exclude)
    if ids:  # the evaluation each cell is, for a caller that reads its answers
        for cell in (cell for cells in newest.values() for cell in cells.values()):
            cell["evaluation_id"] = cell["_id"]
    return {
        run_id: {name: {k: v for k, v in cell.items() if not k.startswith("_")} for name, cell in cells.items()}
        for run_id, cells in newest.items()
    }


def _leave_out(newest: dict[str, dict[str, dict[str, Any]]], exclude: Mapping[str, frozenset[str]]) -> None:
    """Each cell's EM, F1 and n again without its benchmark's `exclude`d questions, and `excluded`: how many of its
    questions were left out (None when it kept no per-question results to leave any out of)."""
    cells = [cell for cells in newest.values() for cell in cells.values()]
    for cell in cells:
        cell["excluded"] = 0 if cell["per_question"] else None
    chosen = {cell["_id"]: cell for cell in cells if cell["per_question"] and exclude.get(cell["benchmark"])}
    kept: dict[int, list[tuple[float, float]]] = defaultdict(list)
    answers = EvaluationAnswer.objects.filter(evaluation_id__in=chosen).order_by()
    for evaluation_id, question_id, em, f1 in answers.values_list("evaluation_id", "question_id", "em", "f1"):
        if question_id in exclude[chosen[evaluation_id]["benchmark"]]:
            chosen[evaluation_id]["excluded"] += 1
        else:
            kept[evaluation_id].append((em, f1))
    for evaluation_id, cell in chosen.items():
        scores = kept.get(evaluation_id, [])
        cell["n"] = len(scores)
        cell["em"] = sum(em for em, _ in scores) / len(scores) if scores else None
        cell["f1"] = sum(f1 for _, f1 in scores) / len(scores) if scores else None


def _joins(cell: dict[str, Any], step: int, request: int | None) -> bool:
    """Whether an f1 row belongs to the evaluation `cell` holds: the same step and request, and none joined yet."""
    return cell["step"] == step and cell["_request"] == request and not cell["_f1_row"]


def run_benchmark_names(*, run: Run) -> list[str]:
    """The benchmarks of the run's config, then any other it was evaluated on (a requested evaluation's)."""
    configured = [str(name) for name in (run.config.get("eval") or {}).get("benchmarks") or []]
    evaluated = Evaluation.objects.filter(run=run, metric__in=BENCHMARK_METRICS).order_by("benchmark")
    return list(dict.fromkeys([*configured, *evaluated.values_list("benchmark", flat=True).distinct()]))


def run_benchmark_table(
    *, run: Run, step: int | None = None, exclude: Mapping[str, frozenset[str]] | None = None
) -> dict[str, Any]:
    """Table 1 of one run: per benchmark its EM and F1 (see `newest_evaluations`: from the per-question rows when
    the evaluation kept them) and their unweighted mean over the benchmarks ("Avg."; a metric some benchmark lacks
    has none). By default each benchmark's newest evaluation (the final one once the run finished); with `step`, the
    evaluations at that step; with `exclude`, without those questions of each benchmark (the ones also in training).
    `steps` lists the steps that have any; InvalidInput naming `step` for one without."""
    steps = list(
        Evaluation.objects.filter(run=run, metric__in=BENCHMARK_METRICS)
        .order_by("step")
        .values_list("step", flat=True)
        .distinct()
    )
    if step is not None and step not in steps:
        shown = ", ".join(map(str, steps)) or "none yet"
        raise InvalidInput({"step": [f"the run has no evaluation at step {step} (steps with evaluations: {shown})"]})
    cells = newest_evaluations([run], step=step, exclude=exclude).get(str(run.pk), {})
    benchmarks = [cells[name] for name in sorted(cells)]
    average = {metric: _mean_of(cell[metric] for cell in benchmarks) for metric in BENCHMARK_METRICS}
    return {"step": step, "steps": steps, "benchmarks": benchmarks, "average": average}


def _mean_of(values: Iterable[float | None]) -> float | None:
    """The unweighted mean, or None when there is nothing or any value is missing."""
    items = list(values)
    if not items or any(value is None for value in items):
        return None
    return sum(value for value in items if value is not None) / len(items)


def evaluation_versions(runs: list[Run]) -> dict[str, str]:
    """Per run with evaluations, the count and newest id of its evaluations ("12:3456"): what changes when a settled
    run is evaluated again."""
    counts = (
        Evaluation.objects.filter(run__in=runs)
        .order_by()
        .values("run_id")
        .annotate(count=Count("id"), newest=Max("id"))
        .values_list("run_id", "count", "newest")
    )
    return {str(run_id): f"{count}:{newest}" for run_id, count, newest in counts}


def _newest_cells(runs: list[Run], versions: dict[str, str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """`newest_evaluations(runs, ids=True)` with each cell's question `digest` (`_question_digests`; None where it
    kept no per-question results). A settled run's cells are kept in the cache under its version and its
    `evaluation_versions` (a settled run can still be evaluated again), so comparing it again, with any other runs,
    reads one row of counts for it instead of every answer of every evaluation it made."""
    evaluated = evaluation_versions(runs) if versions is None else versions
    keys = {
        str(run.pk): key
        for run in runs
        if str(run.pk) in evaluated
        and (key := run_cache_key(run=run, name=f"newest-evaluations:{evaluated[str(run.pk)]}")) is not None
    }
    kept = cache.get_many(list(keys.values())) if keys else {}
    cells = {run_id: kept[key] for run_id, key in keys.items() if key in kept}
    missing = [run for run in runs if str(run.pk) in evaluated and str(run.pk) not in cells]
    if missing:
        fresh = newest_evaluations(missing, ids=True)
        chosen = (cell["evaluation_id"] for found in fresh.values() for cell in found.values() if cell["per_question"])
        digests = _question_digests(chosen)
        for found in fresh.values():
            for cell in found.values():
                cell["digest"] = digests.get(cell["evaluation_id"]) if cell["per_question"] else None
        cache.set_many({keys[run_id]: found for run_id, found in fresh.items() if run_id in keys}, CACHED_JSON_S)
        cells |= fresh
    return cells


def _question_digests(evaluation_ids: Iterable[int]) -> dict[int, str]:
    """Per evaluation that kept its per-question results, a digest of the ids of the questions it scored (equal
    digests: the same questions); PostgreSQL computes them, so one row per evaluation comes back, not its answers."""
    ids = set(evaluation_ids)
    if not ids:
        return {}
    rows = (
        EvaluationAnswer.objects.filter(evaluation_id__in=ids)
        .order_by()  # grouped by evaluation alone, not through the model's ordering
        .values("evaluation_id")
        .annotate(digest=MD5(StringAgg("question_id", delimiter="\n", order_by="question_id")))
        .values_list("evaluation_id", "digest")
    )
    return dict(rows)


def question_sets(cells: list[dict[str, Any]]) -> str:
    """Whether the evaluations of a column were scored on the same questions: `same`; `different`, when the ids of
    their questions differ (or, where one kept no per-question results, their numbers do); `unrecorded`, when they
    scored as many questions but not every one kept which.

    >>> question_sets([{"digest": "a", "n": 2}, {"digest": "a", "n": 2}])
    'same'
    >>> question_sets([{"digest": "a", "n": 2}, {"digest": None, "n": 3}])
    'different'
    >>> question_sets([{"digest": "a", "n": 2}, {"digest": None, "n": 2}])
    'unrecorded'
    """
    digests = {cell["digest"] for cell in cells}
    if None not in digests:
        return "same" if len(digests) <= 1 else "different"
    if len({cell["n"] for cell in cells}) > 1:
        return "different"
    return "unrecorded" if len(cells) > 1 else "same"


def column_best(by_run: dict[str, float]) -> list[str]:
    """The runs that share a column's highest value, when some other run has less; none when every run there has
    the same value (all 0.000, say) or only one run has a value, since then nothing is better than anything.

    >>> column_best({"a": 0.2, "b": 0.4, "c": 0.4})
    ['b', 'c']
    >>> column_best({"a": 0.0, "b": 0.0}), column_best({"a": 0.3})
    ([], [])
    """
    top = max(by_run.values())
    tied = [run_id for run_id, value in by_run.items() if math.isclose(value, top, rel_tol=1e-12, abs_tol=1e-12)]
    return tied if len(tied) < len(by_run) else []


def benchmark_deltas(
    table: dict[str, Any], scored: dict[str, dict[str, dict[str, Any]]], *, baseline: str
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int | None]]]:
    """Each other run's value minus the baseline's, per column both have, on the questions both scored: for two
    evaluations on the same questions, the difference of their values; on different questions, the difference of
    their means over the questions they share (none shared: no delta); where either kept no per-question results,
    the difference of their values when they scored as many questions (which ones is not recorded), else no delta.
    The average's delta is the mean of the columns' deltas, given when every column of the table has one. Returns
    the deltas and, per delta, the questions it is over (None: unrecorded)."""
    metric = table["metric"]
    base = scored.get(baseline, {})
    pairs: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    for run_id, cells in scored.items():
        if run_id != baseline:
            pairs |= {(run_id, column): (cell, base[column]) for column, cell in cells.items() if column in base}
    unlike = {
        (cell["evaluation_id"], other["evaluation_id"])
        for cell, other in pairs.values()
        if cell["digest"] and other["digest"] and cell["digest"] != other["digest"]
    }
    answers = _answer_values({id_ for pair in unlike for id_ in pair}, metric)
    deltas: dict[str, dict[str, float]] = {row["run_id"]: {} for row in table["rows"] if row["run_id"] != baseline}
    questions: dict[str, dict[str, int | None]] = {run_id: {} for run_id in deltas}
    for (run_id, column), (cell, other) in pairs.items():
        if (cell["evaluation_id"], other["evaluation_id"]) in unlike:
            mine, theirs = answers[cell["evaluation_id"]], answers[other["evaluation_id"]]
            shared = mine.keys() & theirs.keys()
            if shared:
                deltas[run_id][column] = (sum(mine[q] for q in shared) - sum(theirs[q] for q in shared)) / len(shared)
                questions[run_id][column] = len(shared)
        elif cell["digest"] and other["digest"]:
            deltas[run_id][column] = cell[metric] - other[metric]
            questions[run_id][column] = cell["n"]
        elif cell["n"] == other["n"]:
            deltas[run_id][column] = cell[metric] - other[metric]
            questions[run_id][column] = None
    for delta in deltas.values():
        if table["columns"] and all(column in delta for column in table["columns"]):
            delta["average"] = sum(delta[column] for column in table["columns"]) / len(table["columns"])
    return deltas, questions


def _answer_values(evaluation_ids: set[int], metric: str) -> dict[int, dict[str, float]]:
    """evaluation id → question id → its `metric` (em or f1) on that question."""
    values: dict[int, dict[str, float]] = {id_: {} for id_ in evaluation_ids}
    rows = EvaluationAnswer.objects.filter(evaluation_id__in=evaluation_ids).order_by()
    for evaluation_id, question_id, value in rows.values_list("evaluation_id", "question_id", metric):
        values[evaluation_id][question_id] = value
    return values


def _compare_series(runs: list[Run]) -> dict[str, dict[str, list[Any]]]:
    """Fig. 2's series of each run, one value per stored step (run id → column → values). A settled run's are read
    once and then kept in the cache (`run_cache_key`); the rest are read together in one query."""
    names = ("step", *COMPARE_SERIES)
    keys = {str(run.pk): run_cache_key(run=run, name="compare-series") for run in runs}
    kept = cache.get_many([key for key in keys.values() if key is not None])
    series = {run_id: kept[key] for run_id, key in keys.items() if key in kept}
    missing = [run for run in runs if str(run.pk) not in series]
    if missing:
        read: dict[str, list[tuple[Any, ...]]] = {str(run.pk): [] for run in missing}
        rows = StepMetric.objects.filter(run__in=missing).order_by("run_id", "step").values_list("run_id", *names)
        for run_id, *values in rows:
            read[str(run_id)].append(values)
        for run_id, steps in read.items():
            columns = list(zip(*steps, strict=True)) or [() for _ in names]
            series[run_id] = {name: list(column) for name, column in zip(names, columns, strict=True)}
        cache.set_many({keys[run_id]: series[run_id] for run_id in read if keys[run_id] is not None}, CACHED_JSON_S)
    return {str(run.pk): series[str(run.pk)] for run in runs}


def comparison_cache_key(
    *, runs: list[Run], metric: str, baseline: Run | None, versions: dict[str, str] | None = None
) -> str | None:
    """A cache key for the comparison of these runs (`run_compare`) once none of them is active; None before. It
    holds each run's version (`run_cache_key`), name and tags, and its `evaluation_versions` (read here unless
    given): a settled run can still be renamed, tagged and evaluated again, and each changes what the comparison
    shows."""
    parts = [metric, str(baseline.pk) if baseline is not None else "-"]
    for run in runs:
        key = run_cache_key(run=run, name="compare")
        if key is None:
            return None
        parts += [key, run.name, *run_tag_names(run=run)]
    evaluated = evaluation_versions(runs) if versions is None else versions
    parts += [evaluated.get(str(run.pk), "-") for run in runs]
    digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()
    return f"runs:v{CACHE_VERSION}:compare:{digest}"


def run_compare(
    *, runs: list[Run], metric: str = "em", baseline: Run | None = None, versions: dict[str, str] | None = None
) -> dict[str, Any]:
    """Everything the compare page shows: the Fig. 2 series of each run, the benchmark table, the config fields
    that differ, and deltas against the baseline run (one of `runs`) with the questions each is over. `versions`:
    the runs' `evaluation_versions`, when the caller has read them."""
    table, scored = _compare_table(runs, metric=metric, versions=versions)
    baseline_id = str(baseline.pk) if baseline is not None else None
    deltas, questions = benchmark_deltas(table, scored, baseline=baseline_id) if baseline_id else ({}, {})
    return {
        "runs": [
            {
                "id": str(run.pk),
                "name": run.name,
                "status": run.status,
                "preset": run.preset,
                "backend": run.backend,
                "step": run.step,
                "total_steps": run.total_steps,
                "tags": run_tag_names(run=run),
            }
            for run in runs
        ],
        "series": _compare_series(runs),
        "benchmarks": table,
        "config_diff": config_diff({str(run.pk): run.config for run in runs}),
        "baseline": baseline_id,
        "deltas": deltas,
        "delta_questions": questions,
    }


def team_tracking(*, team: Team) -> dict[str, Any] | None:
    """The team's default trackers as a whole tracking section (a field added to the engine since it was set shows
    its default), or None when the team has none. One that the engine no longer accepts is shown as stored: a run
    that gets it is refused, naming the field."""
    stored = team_tracking_default(team)
    if not stored:
        return None
    try:
        return dataclasses.asdict(tracking_section(stored))
    except InvalidInput:
        return stored


# -- what the workers read ---------------------------------------------------------------------------------------


def run_queued(*, run_id: UUID | str) -> Run | None:
    """The run with its team while it is queued (a worker looks before it claims it); None otherwise."""
    return Run.objects.select_related("team").filter(pk=run_id, status=Run.Status.QUEUED).first()


def run_for_worker(*, run_id: UUID | str) -> Run:
    """A run its worker has claimed, with its team and the checkpoint it resumes from."""
    return Run.objects.select_related("resume_checkpoint", "team").get(pk=run_id)


def evaluation_request_for_worker(*, request_id: int) -> EvaluationRequest:
    """An evaluation request its worker has claimed, with its run's team and its checkpoint."""
    return EvaluationRequest.objects.select_related("run__team", "checkpoint").get(pk=request_id)


def instruction_by_key(*, run: Run, key: str) -> Instruction | None:
    """The run's instruction with this engine id (`ins-0003`), or None when the run has none."""
    return Instruction.objects.filter(run=run, key=key).first()


def heatmap_for_worker(*, heatmap_id: int) -> Heatmap:
    """A heatmap its worker has claimed, with its run's team."""
    return Heatmap.objects.select_related("run__team").get(pk=heatmap_id)


def heatmap_cells_for_worker(*, heatmap: Heatmap) -> list[HeatmapCell]:
    """The heatmap's cells with their instruction and checkpoint, without the answers stored so far."""
    return list(heatmap.cells.select_related("instruction", "checkpoint").defer("trajectories"))
