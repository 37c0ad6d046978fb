"""What a finished run learnt, in plain words for its page: correctness (exact match) before and after training on
the same test questions with a 95 % interval, the format and the searching its rollouts learnt, what the training
reward was earned for, and whether an evolved instruction won. Numbers come from what the recorder stored; the
statistics are the engine's (`inspo_engine.stats`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from inspo_engine.stats import MINUS, compare, mean_of_means_interval

from .models import Evaluation, Run, StepMetric

WINDOW = 3
"""Steps averaged at each end of the run when its first steps are set against its last."""

FORMAT_RISE = 0.05
"""How much the well-formed share must rise, first steps to last, for the summary to say the run taught the format."""

EVOLVED = {"reflection": "reflection", "paraphrase": "paraphrase", "history": "the history proposer"}
INITIAL = {"seed": "the seed instruction", "manual": "an instruction from the config"}


@dataclass
class Correctness:
    """One benchmark's exact match before and after training, paired on its questions."""

    benchmark: str
    questions: int
    after: float
    after_step: int
    after_instruction: str | None
    before: float | None = None
    before_step: int | None = None
    before_instruction: str | None = None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    constant: bool = False
    """Every question scored the same before and after: no spread, so no interval can be estimated."""

    @property
    def moved(self) -> bool:
        """Whether the interval of after − before excludes 0."""
        return self.low is not None and self.high is not None and (self.low > 0.0 or self.high < 0.0)


@dataclass
class Learnt:
    """What `run_learnt` found; `verdict` is its headline and `facts` the sentences under it."""

    verdict: str
    facts: list[str] = field(default_factory=list)
    correctness: list[Correctness] = field(default_factory=list)
    taught: str = ""
    """'correctness', 'worse', 'format' (the format only), 'nothing', or 'unknown' (no evaluation before training)."""


def _points(x: float) -> str:
    return f"{100 * x + 0.0:+.1f}".replace("-", MINUS)


def _percent(x: float) -> str:
    return f"{100 * x:.0f} %"


def _ends(values: list[float | None]) -> tuple[float, float] | None:
    """The mean of the first and of the last WINDOW recorded values (None with fewer than two values)."""
    kept = [v for v in values if v is not None]
    if len(kept) < 2:
        return None
    n = min(WINDOW, len(kept) // 2)
    return statistics.fmean(kept[:n]), statistics.fmean(kept[-n:])


def _answers(evaluation: Evaluation) -> dict[str, float]:
    return dict(evaluation.answers.values_list("question_id", "em"))


def _correctness(run: Run) -> list[Correctness]:
    """Per benchmark of the run's own evaluations (not requested ones): the final one against the one before the
    first step, when the run made it (`eval.eval_at_start`), paired on the questions both scored."""
    evaluations = (
        Evaluation.objects.filter(run=run, metric="em", request__isnull=True)
        .select_related("instruction")
        .order_by("benchmark", "step", "id")
    )
    by_benchmark: dict[str, list[Evaluation]] = {}
    for evaluation in evaluations:
        by_benchmark.setdefault(evaluation.benchmark, []).append(evaluation)
    found = []
    for benchmark, rows in by_benchmark.items():
        final = rows[-1]
        if final.step == 0:
            continue
        key = final.instruction.key if final.instruction else None
        row = Correctness(benchmark, final.n, final.value, final.step, key)
        start = next((e for e in rows if e.step == 0), None)
        after = _answers(final)
        before = _answers(start) if start is not None else {}
        common = sorted(set(after) & set(before))
        if start is not None and len(common) >= 2:
            comparison = compare("after", {0: {q: after[q] for q in common}}, "before", {0: before})
            row.before, row.before_step = statistics.fmean(before[q] for q in common), 0
            row.before_instruction = start.instruction.key if start.instruction else None
            row.after, row.questions = statistics.fmean(after[q] for q in common), len(common)
            row.difference, row.low, row.high = comparison.mean, comparison.low, comparison.high
            row.constant = all(after[q] == before[q] for q in common)
        elif after:
            interval = mean_of_means_interval([[v] for v in after.values()])
            row.low, row.high = interval.low, interval.high
        found.append(row)
    return found


def _correctness_fact(row: Correctness) -> str:
    if row.before is None:
        interval = f", 95 % interval [{row.low:.3f}, {row.high:.3f}]" if row.low is not None else ""
        return (
            f"Exact match on {row.questions} {row.benchmark} test questions after training (step {row.after_step}, "
            f"instruction {row.after_instruction or '—'}): {row.after:.3f}{interval}. The run did not evaluate the "
            "untrained policy (eval.eval_at_start is off), so there is no before to set it against."
        )
    text = (
        f"Exact match on the same {row.questions} {row.benchmark} test questions: {row.before:.3f} before training "
        f"(step 0, the untrained policy with instruction {row.before_instruction or '—'}), {row.after:.3f} after "
        f"(step {row.after_step}, instruction {row.after_instruction or '—'}): {_points(row.difference or 0.0)} "
        "EM points"
    )
    if row.constant:
        return text + "; every question scored the same before and after, so no interval can be estimated."
    return (
        f"{text}, 95 % interval [{_points(row.low or 0.0)}, {_points(row.high or 0.0)}] (paired on the questions, "
        "one seed: it counts question sampling only)."
    )


def run_learnt(*, run: Run) -> Learnt | None:
    """The summary of a finished run; None for a run that has not finished."""
    if run.status != Run.Status.FINISHED:
        return None
    rows = list(
        StepMetric.objects.filter(run=run).order_by("step").values_list("metrics", "tool_calls_mean", "reward_mean")
    )
    metrics: list[dict[str, Any]] = [m for m, _, _ in rows]
    correctness = _correctness(run)
    facts = [_correctness_fact(row) for row in correctness]

    formed = _ends([m.get("well_formed") for m in metrics])
    if formed:
        facts.append(
            f"Well-formed replies (think, search, answer in the protocol's order): {_percent(formed[0])} over the "
            f"first steps, {_percent(formed[1])} over the last {WINDOW}."
        )
    searches = _ends([calls for _, calls, _ in rows])
    if searches:
        facts.append(f"Searches per reply: {searches[0]:.2f} over the first steps, {searches[1]:.2f} over the last.")
    em = _ends([m.get("em") for m in metrics])
    if em:
        facts.append(
            f"Training rollouts that answered exactly right: {_percent(em[0])} over the first steps, "
            f"{_percent(em[1])} over the last."
        )
    last = rows[-WINDOW:]
    parts = [(m.get("reward_format"), m.get("reward_correct")) for m, _, _ in last]
    if last and all(f is not None and c is not None for f, c in parts):
        facts.append(
            f"Training reward over the last {len(last)} steps: {statistics.fmean(r for _, _, r in last):.3f}, of "
            f"which {statistics.fmean(f for f, _ in parts):.3f} for the form and "
            f"{statistics.fmean(c for _, c in parts):.3f} for correct answers."
        )
    facts.append(_best_fact(run))

    format_rose = formed is not None and formed[1] - formed[0] >= FORMAT_RISE
    measured = [row for row in correctness if row.before is not None]
    if not measured:
        taught = "unknown"
        verdict = "This run did not evaluate the untrained policy, so it cannot say whether correctness moved" + (
            ": what the curves show moving is the format." if format_rose else "."
        )
    else:
        rose = [row.benchmark for row in measured if row.moved and (row.difference or 0.0) > 0]
        fell = [row.benchmark for row in measured if row.moved and (row.difference or 0.0) < 0]
        if rose:
            taught = "correctness"
            verdict = f"This run taught correctness: exact match rose beyond its 95 % interval on {', '.join(rose)}."
        elif fell:
            taught = "worse"
            verdict = f"Exact match fell beyond its 95 % interval on {', '.join(fell)}."
        elif format_rose:
            taught = "format"
            verdict = (
                "This run taught the format only: correctness did not move (exact match after training is within "
                f"the interval of before), while well-formed replies rose. In {run.total_steps} steps it learnt the "
                "form of the protocol, not yet the answers."
            )
        elif formed is None:
            taught = "nothing"
            verdict = (
                "Correctness did not move (exact match after training is within the interval of before); this run's "
                "steps recorded no well-formed share to say whether the format did."
            )
        else:
            taught = "nothing"
            verdict = "Neither correctness nor the format moved measurably in this run."
    return Learnt(verdict=verdict, facts=facts, correctness=correctness, taught=taught)


def _best_fact(run: Run) -> str:
    best = run.best_instruction
    if best is None:
        return "The run recorded no best instruction."
    if best.origin in EVOLVED:
        return (
            f"An evolved instruction won: the best, {best.key}, was written by {EVOLVED[best.origin]} at step "
            f"{best.birth_step}."
        )
    if best.origin == "human":
        return f"The best instruction, {best.key}, is one a person injected at step {best.birth_step}."
    where = INITIAL.get(best.origin, f"an instruction of origin {best.origin}")
    return f"No evolved instruction won: the best, {best.key}, is {where}, there from the start."
