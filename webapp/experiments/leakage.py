"""Leakage in an experiment's verdicts: per benchmark, which of the questions its runs were evaluated on were also in
a run's training split (`webapp.data.leakage`), and the per-question scores without them when the reader asks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from webapp.data.leakage import config_leakage
from webapp.runs.models import Run

ArmScores = dict[str, dict[str, dict[int, dict[str, float]]]]
"""arm → benchmark → seed → question id → score (as `selectors._answers` gives them)."""


def overlapping_questions(runs: list[Run], names: Mapping[Any, Mapping[str, str]]) -> dict[str, frozenset[str]]:
    """Experiment benchmark name → the ids of its questions also in the training split of any of `runs` (arms may
    train on different data; the verdicts pair seeds over the same questions, so each leaves out the union).
    `names`: per run id, how its config names each benchmark → the experiment's name."""
    found: dict[str, set[str]] = defaultdict(set)
    seen: dict[str, list[Any]] = {}
    for run in runs:
        config = run.config or {}
        key = repr(((config.get("env") or {}).get("dataset"), config.get("eval"), run.team_id))
        if key not in seen:  # the runs of an experiment mostly train on the same data: check each once
            seen[key] = config_leakage(config, team=run.team)
        for row in seen[key]:
            name = names.get(run.pk, {}).get(row.benchmark)
            if name is not None and row.report is not None and row.report.leaked:
                found[name] |= row.report.question_ids
    return {name: frozenset(ids) for name, ids in found.items()}


def leave_out(scores: ArmScores, overlapping: Mapping[str, frozenset[str]]) -> ArmScores:
    """The scores without each benchmark's overlapping questions."""
    return {
        arm: {
            benchmark: {
                seed: {q: s for q, s in by_question.items() if q not in overlapping.get(benchmark, frozenset())}
                for seed, by_question in seeds.items()
            }
            for benchmark, seeds in benchmarks.items()
        }
        for arm, benchmarks in scores.items()
    }


def leakage_rows(
    benchmarks: list[str], scores: ArmScores, overlapping: Mapping[str, frozenset[str]], *, excluded: bool
) -> list[dict[str, Any]]:
    """Per benchmark: of the questions the runs were evaluated on (`questions`), how many were also in training
    (`leaked`), and what the verdicts are computed on (`text`)."""
    rows = []
    for benchmark in benchmarks:
        evaluated = {
            q for seeds in (by_benchmark.get(benchmark, {}) for by_benchmark in scores.values())
            for by_question in seeds.values() for q in by_question
        }  # fmt: skip
        leaked = len(evaluated & overlapping.get(benchmark, frozenset()))
        kept = len(evaluated) - leaked
        if not leaked:
            text = f"{benchmark}: none of its {len(evaluated)} evaluated questions was in training"
        elif excluded:
            text = (
                f"{benchmark}: computed on the {kept} of {len(evaluated)} evaluated questions not in training "
                f"({leaked} left out)"
            )
        else:
            text = (
                f"{benchmark}: {leaked} of {len(evaluated)} evaluated questions also in training; the verdicts "
                f"include them"
            )
        rows.append(
            {"benchmark": benchmark, "questions": len(evaluated), "leaked": leaked, "excluded": excluded and leaked > 0}
            | {"text": text}
        )
    return rows
