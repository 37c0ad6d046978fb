"""Builds a ready-to-run CoEvolution from a RunConfig: data, retriever, backend and optimizer; it trains nothing.

The CLI and the web app's workers both start runs through `build_run`, so a run means the same thing everywhere.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .backends.base import PolicyBackend
from .checkpoints import read_state
from .coevolution import CoEvolution
from .config import RunConfig
from .env.datasets import load_corpus, load_questions
from .env.protocol import Passage, Retriever
from .env.retrievers import build_retriever
from .env.rewards import exact_match, f1, is_valid_format
from .events import EventSink
from .netpolicy import NetPolicy
from .optimizers import OptimizerClient, build_optimizer
from .population import Instruction, Population
from .schedule import needs_optimizer
from .types import Question, Trajectory

if TYPE_CHECKING:
    from .backends.torch.backend import TorchBackend


@dataclass
class RunInputs:
    """The data a run trains and evaluates on."""

    train: list[Question]
    eval_sets: dict[str, list[Question]]
    corpus: list[Passage] | None


def load_inputs(config: RunConfig) -> RunInputs:
    """Training questions, evaluation benchmarks (test split, or the file itself) and the passage corpus."""
    env, evaluation = config.env, config.eval
    train = load_questions(env.dataset, "train")
    limit = evaluation.eval_samples or None
    eval_sets = {name: load_questions(name, "test", limit=limit) for name in evaluation.benchmarks}
    corpus = None if env.retriever == "remote" else load_corpus(env.corpus)
    return RunInputs(train=train, eval_sets=eval_sets, corpus=corpus)


def make_retriever(
    config: RunConfig, corpus: Sequence[Passage] | None, cache_dir: Path, policy: NetPolicy | None = None
) -> Retriever:
    env = config.env
    return build_retriever(
        env.retriever,
        list(corpus) if corpus is not None else None,
        url=env.retriever_url,
        cache_dir=cache_dir / "retrievers",
        policy=policy,
    )


def make_backend(config: RunConfig, retriever: Retriever, cache_dir: Path) -> PolicyBackend:
    if config.backend.name != "torch":
        raise ValueError(f"backend {config.backend.name!r} runs on the GPU queue; this process runs 'torch' only")
    from .backends.torch.backend import TorchBackend

    return TorchBackend(config, retriever=retriever, cache_dir=cache_dir / "models")


def make_optimizer(
    config: RunConfig, cache_dir: Path, api_key: str | None, policy: NetPolicy | None = None
) -> OptimizerClient | None:
    """The optimizer client, or None when the config never asks one anything; `policy` checks a base URL that
    the caller did not choose itself."""
    if not needs_optimizer(config):
        return None
    optimizer = config.optimizer
    if optimizer.provider == "local" and optimizer.local_model_path:
        from .backends.torch.model import resolve_model

        local_path = resolve_model(optimizer.local_model_path, cache_dir / "models")
        optimizer = replace(optimizer, local_model_path=str(local_path))
    return build_optimizer(optimizer, api_key=api_key, seed=config.seed, policy=policy)


def build_run(
    config: RunConfig,
    *,
    out_dir: Path,
    cache_dir: Path,
    sink: EventSink,
    api_key: str | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    owns_run: Callable[[], bool] = lambda: True,
    backend: PolicyBackend | None = None,
    retriever_policy: NetPolicy | None = None,
    optimizer_policy: NetPolicy | None = None,
) -> CoEvolution:
    """Everything a run needs, wired; `backend` may be given (tests, or a backend built elsewhere). The policies
    confine URLs that a user chose (the retriever's, the optimizer's base URL); None trusts the URL."""
    inputs = load_inputs(config)
    if backend is None:
        retriever = make_retriever(config, inputs.corpus, cache_dir, retriever_policy)
        backend = make_backend(config, retriever, cache_dir)
    return CoEvolution(
        config,
        backend=backend,
        train_questions=inputs.train,
        optimizer=make_optimizer(config, cache_dir, api_key, optimizer_policy),
        sink=sink,
        out_dir=out_dir,
        eval_sets=inputs.eval_sets,
        should_stop=should_stop,
        owns_run=owns_run,
    )


# -- evaluating a checkpoint (the CLI's `eval` and the web app's evaluation task) -------------------------------


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
