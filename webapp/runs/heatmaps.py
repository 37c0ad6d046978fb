"""The instruction × checkpoint heatmap of a run: which instructions (living or pruned) and checkpoints a request
names, what it costs (cells × questions, bounded), the request itself, and the reads of its grid and of one cell's
answers. Its services check roles like every other service and its reads expect a run from `selectors.run_get`;
the worker's side of its life (claim, each cell stored, finish, fail, the sweep) is in `lifecycle`.

Why a heatmap: the paper claims that the best instruction changes as the policy learns. Scoring the same
instructions with every checkpoint on the same questions shows whether it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django.utils import timezone

from webapp.accounts.models import Role, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import Conflict, InvalidInput
from webapp.data.services import job_data_record

from . import tasks
from .configs import benchmark_paths
from .models import Checkpoint, Heatmap, HeatmapCell, Instruction, PopulationMember, PopulationSnapshot, Run, RunNote
from .selectors import column_best

MAX_INSTRUCTIONS = 12
"""Rows of a heatmap at most."""
MAX_CHECKPOINTS = 12
"""Columns of a heatmap at most; by default the run's checkpoints on disk, spread over training when it has more."""
MAX_SAMPLE_SIZE = 500
"""Questions per cell at most."""
DEFAULT_TOP_K = 4
"""Rows when none are named: the instructions with the highest weights."""
DEFAULT_SAMPLE_SIZE = 50
ACTIVE = (Heatmap.Status.QUEUED, Heatmap.Status.RUNNING)

T = TypeVar("T")


@dataclass(frozen=True)
class HeatmapPlan:
    """What a heatmap request evaluates — its rows, columns and question sample — and what that costs."""

    instructions: list[Instruction]
    checkpoints: list[Checkpoint]
    benchmark: str
    sample_size: int
    sample_seed: int

    @property
    def cells(self) -> int:
        return len(self.instructions) * len(self.checkpoints)

    @property
    def answers(self) -> int:
        """Greedy answers the worker produces at most: cells × questions (fewer when the benchmark is smaller)."""
        return self.cells * self.sample_size


def max_answers() -> int:
    """The most answers (cells × questions) one heatmap may cost: INSPO_HEATMAP_MAX_ANSWERS."""
    return int(settings.INSPO_HEATMAP_MAX_ANSWERS)


# -- services ----------------------------------------------------------------------------------------------------


def heatmap_plan(
    *,
    run: Run,
    user: User,
    instructions: Sequence[str] | None = None,
    top_k: int | None = None,
    steps: Sequence[int] | None = None,
    benchmark: str = "builtin",
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    sample_seed: int = 0,
) -> HeatmapPlan:
    """The heatmap a member asks for, checked: the named instructions of the run (default: the `top_k` by weight,
    living or pruned), the named checkpoint steps still on disk (default: all of them, spread over training beyond
    MAX_CHECKPOINTS), a benchmark in the team's data, and a cost within INSPO_HEATMAP_MAX_ANSWERS. InvalidInput
    names each bad field; Conflict when the run has no instruction or no checkpoint yet."""
    require_role(user, run.team, Role.MEMBER)
    chosen = _rows(run, instructions, top_k)
    columns = _columns(run, steps)
    if not 1 <= sample_size <= MAX_SAMPLE_SIZE:
        raise InvalidInput({"sample_size": [f"must be ≥ 1 and ≤ {MAX_SAMPLE_SIZE}, got {sample_size}"]})
    [confined] = benchmark_paths([benchmark.strip() or "builtin"], team=run.team, field="benchmark")
    plan = HeatmapPlan(chosen, columns, confined, sample_size, sample_seed)
    if plan.answers > max_answers():
        raise InvalidInput(
            {
                "sample_size": [
                    f"{len(chosen)} instructions × {len(columns)} checkpoints × {sample_size} questions = "
                    f"{plan.answers} answers; a heatmap may cost at most {max_answers()}: choose fewer"
                ]
            }
        )
    return plan


def _rows(run: Run, keys: Sequence[str] | None, top_k: int | None) -> list[Instruction]:
    if keys is None:
        k = DEFAULT_TOP_K if top_k is None else top_k
        if not 1 <= k <= MAX_INSTRUCTIONS:
            raise InvalidInput({"top_k": [f"must be ≥ 1 and ≤ {MAX_INSTRUCTIONS}, got {k}"]})
        ranked = [choice["id"] for choice in heatmap_instruction_choices(run=run)][:k]
        if not ranked:
            raise Conflict("the run has no instructions yet")
        keys = ranked
    wanted = list(dict.fromkeys(key.strip() for key in keys if key.strip()))
    if not wanted:
        raise InvalidInput({"instructions": ["name at least one instruction"]})
    if len(wanted) > MAX_INSTRUCTIONS:
        raise InvalidInput({"instructions": [f"at most {MAX_INSTRUCTIONS} instructions, got {len(wanted)}"]})
    found = {ins.key: ins for ins in Instruction.objects.filter(run=run, key__in=wanted)}
    unknown = [key for key in wanted if key not in found]
    if unknown:
        names = ", ".join(repr(key[:40]) for key in unknown[:5])
        raise InvalidInput({"instructions": [f"no instruction {names} in this run"]})
    return [found[key] for key in wanted]


def _columns(run: Run, steps: Sequence[int] | None) -> list[Checkpoint]:
    on_disk = list(Checkpoint.objects.filter(run=run, available=True).order_by("step"))
    if not on_disk:
        raise Conflict("the run has no checkpoint yet: a heatmap scores checkpoints")
    if steps is None:
        return spread(on_disk, MAX_CHECKPOINTS)
    wanted = sorted(set(steps))
    if not wanted:
        raise InvalidInput({"steps": ["name at least one checkpoint step"]})
    if len(wanted) > MAX_CHECKPOINTS:
        raise InvalidInput({"steps": [f"at most {MAX_CHECKPOINTS} checkpoints, got {len(wanted)}"]})
    by_step = {checkpoint.step: checkpoint for checkpoint in on_disk}
    missing = [step for step in wanted if step not in by_step]
    if missing:
        have = ", ".join(str(step) for step in by_step)
        raise InvalidInput(
            {"steps": [f"no checkpoint on disk for step {', '.join(map(str, missing[:5]))} (steps with one: {have})"]}
        )
    return [by_step[step] for step in wanted]


def spread(items: Sequence[T], most: int) -> list[T]:
    """All of `items` when there are at most `most`, else `most` of them evenly spaced, the first and last
    included.

    >>> spread(list(range(10)), 4)
    [0, 3, 6, 9]
    >>> spread([1, 2], 4)
    [1, 2]
    """
    if len(items) <= most:
        return list(items)
    if most == 1:
        return [items[-1]]
    return [items[round(i * (len(items) - 1) / (most - 1))] for i in range(most)]


def heatmap_request(*, run: Run, user: User, **choices: Any) -> Heatmap:
    """Queue the heatmap `heatmap_plan` checks: one empty cell per (instruction, checkpoint), a `heatmap_requested`
    note on the run's timeline, and the task on the run's queue once committed. Conflict while the run has another
    heatmap queued or running."""
    plan = heatmap_plan(run=run, user=user, **choices)
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()  # two requests at once queue behind each other
        if Heatmap.objects.filter(run=run, status__in=ACTIVE).exists():
            raise Conflict("the run has a heatmap queued or running; wait for it to end")
        heatmap = Heatmap.objects.create(
            run=run,
            requested_by=user,
            benchmark=plan.benchmark,
            sample_size=plan.sample_size,
            sample_seed=plan.sample_seed,
        )
        job_data_record(team=run.team, names=[plan.benchmark], heatmap=heatmap)
        HeatmapCell.objects.bulk_create(
            HeatmapCell(heatmap=heatmap, instruction=instruction, checkpoint=checkpoint, row=row, column=column)
            for row, instruction in enumerate(plan.instructions)
            for column, checkpoint in enumerate(plan.checkpoints)
        )
        RunNote.objects.create(
            run=run,
            step=plan.checkpoints[-1].step,
            kind="heatmap_requested",
            payload={
                "heatmap_id": heatmap.pk,
                "by": user.username,
                "instructions": [instruction.key for instruction in plan.instructions],
                "steps": [checkpoint.step for checkpoint in plan.checkpoints],
                "benchmark": plan.benchmark,
                "questions": plan.sample_size,
                "answers": plan.answers,
            },
            time=timezone.now(),
        )
        tasks.enqueue(heatmap)
    return heatmap


# -- selectors ---------------------------------------------------------------------------------------------------


def heatmap_instruction_choices(*, run: Run) -> list[dict[str, Any]]:
    """Every instruction of the run, heaviest first: its weight when last a member of the population (a pruned
    one's when it was pruned; None if it never was), whether it is in the latest population, and when it was
    pruned."""
    last_snapshot = PopulationSnapshot.objects.filter(run=run).order_by("-step", "-id").values_list("pk", flat=True)
    newest = last_snapshot.first()
    weights: dict[int, float] = {}
    living: set[int] = set()
    rows = (
        PopulationMember.objects.filter(snapshot__run=run)
        .order_by("snapshot__step", "snapshot_id")
        .values_list("instruction_id", "weight", "snapshot_id")
    )
    for instruction_id, weight, snapshot_id in rows:
        weights[instruction_id] = weight
        if snapshot_id == newest:
            living.add(instruction_id)
    choices: list[dict[str, Any]] = [
        {
            "id": ins.key,
            "text": ins.text,
            "origin": ins.origin,
            "weight": weights.get(ins.pk, ins.retired_weight),
            "living": ins.pk in living,
            "retired_step": ins.retired_step,
        }
        for ins in Instruction.objects.filter(run=run).order_by("birth_step", "id")
    ]
    choices.sort(key=lambda c: (c["weight"] is None, -(c["weight"] or 0.0), not c["living"], c["id"]))
    return choices


def heatmap_queryset(*, run: Run) -> QuerySet[Heatmap]:
    """The run's heatmaps, newest first, each with its cells (without their answers) and their rows and columns."""
    cells = HeatmapCell.objects.defer("trajectories").select_related("instruction", "checkpoint")
    return (
        Heatmap.objects.filter(run=run)
        .select_related("requested_by")
        .prefetch_related(Prefetch("cells", queryset=cells.order_by("row", "column")))
        .order_by("-created_at", "-id")
    )


def heatmap_get(*, run: Run, heatmap_id: int) -> Heatmap:
    """One heatmap of the run; 404 for another run's, as for one that does not exist."""
    heatmap = heatmap_queryset(run=run).filter(pk=heatmap_id).first()
    if heatmap is None:
        raise Http404("no such heatmap")
    return heatmap


def heatmap_grid(*, heatmap: Heatmap) -> dict[str, Any]:
    """A heatmap as the page draws it: its rows (instructions, in the order asked), columns (checkpoints, by step),
    each cell's EM, F1 and answered share (null until scored), progress, and per column the instructions tied for
    the best EM when some other one scored less (see `selectors.column_best`)."""
    cells = list(heatmap.cells.all())
    rows = {cell.row: cell.instruction for cell in cells}
    columns = {cell.column: cell.checkpoint for cell in cells}
    by_column: dict[int, dict[str, float]] = {}
    for cell in cells:
        if cell.em is not None:
            by_column.setdefault(cell.checkpoint.step, {})[cell.instruction.key] = cell.em
    done = sum(cell.finished_at is not None for cell in cells)
    return {
        "id": heatmap.pk,
        "status": heatmap.status,
        "benchmark": heatmap.benchmark,
        "sample_size": heatmap.sample_size,
        "sample_seed": heatmap.sample_seed,
        "questions": len(heatmap.question_ids) or None,
        "answers": len(cells) * (len(heatmap.question_ids) or heatmap.sample_size),
        "cells_total": len(cells),
        "cells_done": done,
        "requested_by": heatmap.requested_by.username if heatmap.requested_by else None,
        "error": heatmap.error,
        "created_at": heatmap.created_at,
        "started_at": heatmap.started_at,
        "finished_at": heatmap.finished_at,
        "rows": [_row(rows[i]) for i in sorted(rows)],
        "columns": [{"step": columns[i].step, "checkpoint_id": columns[i].pk} for i in sorted(columns)],
        "cells": [_cell(cell) for cell in cells],
        "best": {str(step): tied for step, scores in by_column.items() if (tied := column_best(scores))},
    }


def _row(instruction: Instruction) -> dict[str, Any]:
    return {
        "id": instruction.key,
        "text": instruction.text,
        "origin": instruction.origin,
        "retired_step": instruction.retired_step,
    }


def _cell(cell: HeatmapCell) -> dict[str, Any]:
    return {
        "id": cell.pk,
        "row": cell.row,
        "column": cell.column,
        "instruction_id": cell.instruction.key,
        "step": cell.checkpoint.step,
        "em": cell.em,
        "f1": cell.f1,
        "answered": cell.answered,
        "n": cell.n,
        "done": cell.finished_at is not None,
    }


def heatmap_list(*, run: Run) -> list[dict[str, Any]]:
    return [heatmap_grid(heatmap=heatmap) for heatmap in heatmap_queryset(run=run)]


def heatmap_cell(*, heatmap: Heatmap, cell_id: int) -> dict[str, Any]:
    """One cell of the heatmap with every answer it gave (empty until scored); 404 for another heatmap's cell."""
    cell = HeatmapCell.objects.select_related("instruction", "checkpoint").filter(heatmap=heatmap, pk=cell_id).first()
    if cell is None:
        raise Http404("no such cell")
    answers = [{**answer, "correct": answer.get("em") == 1.0} for answer in cell.trajectories]
    return {**_cell(cell), "instruction_text": cell.instruction.text, "trajectories": answers}


def heatmap_best_by_step(*, heatmap_id: int) -> dict[str, list[str]]:
    """Per checkpoint step, the instructions tied for the best EM in the heatmap, where some other one scored
    less (for its timeline note)."""
    scores: dict[int, dict[str, float]] = {}
    rows = HeatmapCell.objects.filter(heatmap_id=heatmap_id, em__isnull=False).values_list(
        "checkpoint__step", "instruction__key", "em"
    )
    for step, key, em in rows:
        if em is not None:
            scores.setdefault(step, {})[key] = em
    return {str(step): tied for step, by_key in sorted(scores.items()) if (tied := column_best(by_key))}
