"""Evaluates a checkpoint (or a config's untrained model): its best instruction, and EM, F1, answer and format rates
per benchmark of a policy's greedy answers. The CLI's `eval` and the web app's evaluation task both go through
`evaluate_checkpoint`, the web app's heatmap task through `evaluate_grid` (several instructions × several
checkpoints on one question sample); they train nothing and store nothing. The policy is the caller's (an
`Answerer`, such as the one `build.checkpoint_policy` loads): this module builds no backend.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .checkpoints import read_state
from .config import RunConfig
from .env.datasets import load_questions
from .env.rewards import exact_match, f1, is_valid_format
from .population import Instruction, Population
from .types import Question, Trajectory


class Answerer(Protocol):
    """What evaluation needs of a policy: one greedy answer per question, its reward being EM."""

    def answer(self, instruction: str, questions: Sequence[Question]) -> list[Trajectory]: ...


@dataclass(frozen=True)
class BenchmarkResult:
    """One benchmark's answers and their scores (see `answer_scores`)."""

    benchmark: str
    trajectories: list[Trajectory]
    scores: dict[str, float]


def evaluate_checkpoint(
    policy: Answerer, instruction: str, benchmarks: Sequence[str], *, split: str = "test", limit: int | None = None
) -> Iterator[BenchmarkResult]:
    """Each benchmark's `split` (at most `limit` questions) answered greedily by `policy` with `instruction`, and
    scored; one result per benchmark as soon as it is done."""
    for name in benchmarks:
        trajectories = policy.answer(instruction, load_questions(name, split, limit=limit))
        yield BenchmarkResult(name, trajectories, answer_scores(trajectories))


@dataclass(frozen=True)
class CellResult:
    """One cell of an instruction × checkpoint grid: the instruction's greedy answers with the policy of the
    checkpoint of `step`, and their scores (see `answer_scores`)."""

    instruction_id: str
    step: int
    trajectories: list[Trajectory]
    scores: dict[str, float]


def evaluate_grid(
    load_policy: Callable[[Path], Answerer],
    policies: Mapping[int, Path],
    instructions: Mapping[str, str],
    questions: Sequence[Question],
    *,
    skip: Collection[tuple[str, int]] = (),
) -> Iterator[CellResult]:
    """Every instruction (id → text) answered greedily on the same `questions` by the policy of every checkpoint
    (step → its `policy/` directory): checkpoint by checkpoint in step order, each policy loaded once, the
    instructions in their given order. Each cell is yielded as soon as it is scored, so a caller can store it and a
    failure loses only the cell in progress. Cells in `skip` (instruction id, step) are not answered again, and a
    checkpoint whose cells are all skipped is not loaded."""
    for step in sorted(policies):
        todo = [(key, text) for key, text in instructions.items() if (key, step) not in skip]
        if not todo:
            continue
        policy = load_policy(policies[step])
        for key, text in todo:
            trajectories = policy.answer(text, questions)
            yield CellResult(key, step, trajectories, answer_scores(trajectories))
        del policy  # the next checkpoint's weights load after this one's are released


def checkpoint_best(checkpoint_dir: Path, config: RunConfig) -> Instruction:
    """I* of the population saved with a checkpoint."""
    state = read_state(checkpoint_dir)
    pop = config.population
    population = Population(
        max_size=64,
        n_parents=1,
        temperature=pop.temperature,
        weight_window=pop.weight_window,
        weighted=config.mode != "random-pool",
    )
    population.load_state(state["population"])
    return population.best()


def answer_scores(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Mean EM and token F1 of greedy answers (whatever the training reward), the share of replies that ended in an
    `<answer>` (answered) and of well-formed trajectories (format), and the mean tool calls; 0 for none."""
    if not trajectories:
        return {"em": 0.0, "f1": 0.0, "answered": 0.0, "format": 0.0, "tool_calls": 0.0}
    return {
        "em": statistics.fmean(exact_match(t.answer, t.question.golden_answers) for t in trajectories),
        "f1": statistics.fmean(f1(t.answer, t.question.golden_answers) for t in trajectories),
        "answered": statistics.fmean(t.answer is not None for t in trajectories),
        "format": statistics.fmean(is_valid_format(t.response) for t in trajectories),
        "tool_calls": statistics.fmean(t.tool_calls for t in trajectories),
    }
