"""Evaluates a checkpoint (or a config's untrained model): its best instruction, its policy, and EM, F1, answer and
format rates per benchmark. The CLI's `eval` and the web app's evaluation task both go through
`evaluate_checkpoint`; it trains nothing and stores nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .build import make_retriever
from .checkpoints import read_state
from .config import RunConfig
from .env.datasets import load_corpus, load_questions
from .env.rewards import exact_match, f1, is_valid_format
from .netpolicy import NetPolicy
from .population import Instruction, Population
from .types import Question, Trajectory

if TYPE_CHECKING:
    from .backends.torch.backend import TorchBackend


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


def checkpoint_best(checkpoint_dir: Path, config: RunConfig) -> Instruction:
    """I* of the population saved with a checkpoint."""
    state = read_state(checkpoint_dir)
    pop = config.population
    population = Population(max_size=64, n_parents=1, temperature=pop.temperature, weight_window=pop.weight_window)
    population.load_state(state["population"])
    return population.best()


def checkpoint_policy(
    config: RunConfig, policy_dir: Path | None, cache_dir: Path, retriever_policy: NetPolicy | None = None
) -> TorchBackend:
    """A checkpoint's policy (its `policy/` Hugging Face directory; None = the config's own, untrained model) with the
    run's retriever, ready to `answer`."""
    from .backends.torch.backend import TorchBackend

    corpus = None if config.env.retriever == "remote" else load_corpus(config.env.corpus)
    retriever = make_retriever(config, corpus, cache_dir, retriever_policy)
    return TorchBackend(config, retriever=retriever, cache_dir=cache_dir / "models", model_path=policy_dir)


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
