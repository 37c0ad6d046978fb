"""What a finished run learnt, in plain words for its page: correctness (exact match) before and after training on
the same test questions with a 95 % interval, the format and the searching its rollouts learnt, what the training
reward was earned for, and whether the last population can tell its best-weighted instruction from the others.
Numbers come from what the recorder stored; the statistics are the engine's (`inspo_engine.stats`). The verdict and
every fact are written from the same rows (`learnt_summary`), so no sentence claims what another one's numbers deny:
no interval is named where none can be estimated, and no instruction "won" while the population's intervals
overlap."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from inspo_engine.stats import MINUS, compare, mean_of_means_interval

from .models import Evaluation, Instruction, PopulationMember, PopulationSnapshot, Run, StepMetric

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
    """The 95 % interval (of after − before when there is a before); None when none can be estimated."""
    constant: bool = False
    """Every question scored the same before and after: nothing changed, and no interval can be estimated."""

    @property
    def moved(self) -> bool:
        """Whether exact match measurably moved: the interval of after − before excludes 0, or, with no interval
        to estimate, every question moved by the same amount (all of them up, or all down)."""
        if self.before is None or self.constant:
            return False
        if self.low is None or self.high is None:
            return (self.difference or 0.0) != 0.0
        return self.low > 0.0 or self.high < 0.0


@dataclass
class Member:
    """An instruction of the last population: its recent reward, the 95 % interval of it (None: too few questions
    behind it) and the questions behind it, as the run page's population section shows them."""

    key: str
    mean: float | None
    low: float | None
    high: float | None
    n: int


@dataclass
class Population:
    """The last population snapshot of a run: the step after which it was taken and its members."""

    step: int
    members: list[Member]

    def resolution(self, best: str) -> tuple[str, list[str], list[str]]:
        """Whether the population tells `best` from the others, by the rule of the run page's population section
        (frontend/src/transforms/population.ts `resolution`): a member is told apart when its 95 % interval lies
        wholly below the best's. ('single' | 'unknown' | 'none' | 'some' | 'all', those below, those tied).

        >>> members = [Member("a", 0.5, 0.4, 0.6, 9), Member("b", 0.2, 0.1, 0.3, 9), Member("c", 0.5, 0.3, 0.7, 9)]
        >>> Population(6, members).resolution("a")
        ('some', ['b'], ['c'])
        """
        chosen = next((m for m in self.members if m.key == best), None)
        others = [m for m in self.members if m.key != best]
        if chosen is None or not others:
            return "single", [], []
        if chosen.low is None or chosen.high is None:
            return "unknown", [], [m.key for m in others]
        low = chosen.low
        below = [m.key for m in others if m.high is not None and m.high < low]
        tied = [m.key for m in others if m.key not in below]
        return ("all" if not tied else "none" if not below else "some"), below, tied


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
            row.difference = comparison.mean
            if not comparison.without_variance():
                row.low, row.high = comparison.low, comparison.high
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
    if row.low is None or row.high is None:
        return text + "; every question's score moved by the same amount, so no interval can be estimated."
    return (
        f"{text}, 95 % interval [{_points(row.low)}, {_points(row.high)}] (paired on the questions, "
        "one seed: it counts question sampling only)."
    )


def _moved_phrase(row: Correctness, many: bool) -> str:
    """How a row that moved moved: beyond its interval, or by the same amount on every question (no interval)."""
    if row.low is None:
        points = _points(row.difference or 0.0)
        return f"on every one of the {row.questions} {row.benchmark} questions alike ({points} EM points)"
    return f"beyond its 95 % interval on {row.benchmark}" if many else "beyond its 95 % interval"


def _unmoved_phrase(row: Correctness, many: bool) -> str:
    """How a row that did not move stayed: the same on every question (no interval), or within its interval."""
    if row.constant:
        return f"exact match did not change on these {row.questions} questions" + (f" of {row.benchmark}" * many)
    return "exact match after training is within the 95 % interval of before" + (f" on {row.benchmark}" * many)


def correctness_verdict(
    rows: list[Correctness], *, format_rose: bool, formed: bool, total_steps: int
) -> tuple[str, str]:
    """The headline and what the run taught ('correctness', 'worse', 'format', 'nothing' or 'unknown'), from the
    same rows the facts show."""
    measured = [row for row in rows if row.before is not None]
    if not measured:
        verdict = "This run did not evaluate the untrained policy, so it cannot say whether correctness moved" + (
            ": what the curves show moving is the format." if format_rose else "."
        )
        return verdict, "unknown"
    many = len(measured) > 1
    rose = [row for row in measured if row.moved and (row.difference or 0.0) > 0]
    fell = [row for row in measured if row.moved and (row.difference or 0.0) < 0]
    if rose:
        moves = " and ".join(_moved_phrase(row, many) for row in rose)
        return f"This run taught correctness: exact match rose {moves}.", "correctness"
    if fell:
        moves = " and ".join(_moved_phrase(row, many) for row in fell)
        return f"Exact match fell {moves}.", "worse"
    still = "; ".join(_unmoved_phrase(row, many) for row in measured)
    if format_rose:
        verdict = (
            f"This run taught the format only: correctness did not move ({still}), while well-formed replies rose. "
            f"In {total_steps} steps it learnt the form of the protocol, not yet the answers."
        )
        return verdict, "format"
    if not formed:
        verdict = (
            f"Correctness did not move ({still}); this run's steps recorded no well-formed share to say whether the "
            "format did."
        )
        return verdict, "nothing"
    return f"Neither correctness ({still}) nor the format moved measurably in this run.", "nothing"


def _population(run: Run) -> Population | None:
    """The run's last population snapshot with its members' recent rewards; None when it recorded none."""
    snapshot = PopulationSnapshot.objects.filter(run=run).order_by("-step", "-id").first()
    if snapshot is None:
        return None
    rows = PopulationMember.objects.filter(snapshot=snapshot).order_by("-weight", "instruction__key")
    members = [
        Member(key, mean, low, high, n or 0)
        for key, mean, low, high, n in rows.values_list(
            "instruction__key", "recent_reward", "recent_low", "recent_high", "recent_samples"
        )
    ]
    return Population(snapshot.step, members)


def population_fact(population: Population | None, best: str | None) -> str | None:
    """What the last population's intervals say of the best-weighted instruction (the run page's population section
    draws the same numbers); None without a population or a best among its members."""
    if population is None or best is None:
        return None
    kind, below, tied = population.resolution(best)
    chosen = next((m for m in population.members if m.key == best), None)
    where = f"In the last population (after step {population.step})"
    if chosen is None:
        return None
    if kind == "single":
        return f"{where}, {best} is the only instruction: there is none to tell it from."
    if kind == "unknown" or chosen.mean is None or chosen.low is None or chosen.high is None:
        return (
            f"{where}, too few questions stand behind {best}'s recent reward ({chosen.n}) to estimate its 95 % "
            "interval: the population cannot yet tell its instructions apart."
        )
    reward = (
        f"{where}, the best-weighted instruction {best} has a recent reward of {chosen.mean:.3f} "
        f"[{chosen.low:.3f}, {chosen.high:.3f}] over {chosen.n} questions"
    )
    if kind == "none":
        return f"{reward}; every other member's 95 % interval overlaps it."
    if kind == "all":
        return f"{reward}; every other member's 95 % interval lies below it."
    return f"{reward}; the 95 % intervals of {', '.join(below)} lie below it, those of {', '.join(tied)} overlap it."


def best_fact(best: Instruction | None, population: Population | None) -> str:
    """Which instruction the run ended with as its best, and whether it won: only when the last population tells it
    from every other member (or it was the only one); otherwise it is the best-weighted one, not yet distinguishable
    from those whose intervals overlap its."""
    if best is None:
        return "The run recorded no best instruction."
    if best.origin in EVOLVED:
        source = f"written by {EVOLVED[best.origin]} at step {best.birth_step}"
    elif best.origin == "human":
        source = f"one a person injected at step {best.birth_step}"
    else:
        source = f"{INITIAL.get(best.origin, f'an instruction of origin {best.origin}')}, there from the start"
    kind, _, tied = population.resolution(best.key) if population is not None else ("unknown", [], [])
    if population is not None and kind in ("all", "single"):
        if best.origin in EVOLVED:
            return f"An evolved instruction won: the best, {best.key}, was {source}."
        if best.origin == "human":
            return f"The best instruction, {best.key}, is {source}."
        return f"No evolved instruction won: the best, {best.key}, is {source}."
    if population is None:
        return f"The best-weighted instruction is {best.key}, {source} (no population was recorded to compare it with)."
    others = "the others" if kind in ("none", "unknown") else ", ".join(tied)
    return f"The best-weighted instruction is {best.key} (not yet distinguishable from {others}), {source}."


def learnt_summary(
    *,
    correctness: list[Correctness],
    formed: tuple[float, float] | None,
    population: Population | None,
    best: Instruction | None,
    total_steps: int,
    rollout_facts: list[str] | None = None,
) -> Learnt:
    """The verdict and the facts from one set of numbers: each benchmark's exact match before and after, the
    well-formed share over the first and the last steps, the last population's intervals and the best instruction
    (`rollout_facts`: what the rollouts and the reward did, placed after the format's)."""
    facts = [_correctness_fact(row) for row in correctness]
    if formed:
        facts.append(
            f"Well-formed replies (think, search, answer in the protocol's order): {_percent(formed[0])} over the "
            f"first steps, {_percent(formed[1])} over the last {WINDOW}."
        )
    facts += rollout_facts or []
    said = population_fact(population, best.key if best is not None else None)
    facts += [said] if said else []
    facts.append(best_fact(best, population if said else None))
    format_rose = formed is not None and formed[1] - formed[0] >= FORMAT_RISE
    verdict, taught = correctness_verdict(
        correctness, format_rose=format_rose, formed=formed is not None, total_steps=total_steps
    )
    return Learnt(verdict=verdict, facts=facts, correctness=correctness, taught=taught)


def run_learnt(*, run: Run) -> Learnt | None:
    """The summary of a finished run; None for a run that has not finished."""
    if run.status != Run.Status.FINISHED:
        return None
    rows = list(
        StepMetric.objects.filter(run=run).order_by("step").values_list("metrics", "tool_calls_mean", "reward_mean")
    )
    metrics: list[dict[str, Any]] = [m for m, _, _ in rows]
    facts = []
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
    return learnt_summary(
        correctness=_correctness(run),
        formed=_ends([m.get("well_formed") for m in metrics]),
        population=_population(run),
        best=run.best_instruction,
        total_steps=run.total_steps,
        rollout_facts=facts,
    )
