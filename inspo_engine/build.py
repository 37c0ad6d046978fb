"""Builds a ready-to-run CoEvolution from a RunConfig (data, retriever, backend and optimizer), and a checkpoint's
policy to evaluate; it trains nothing.

The CLI, the web app's workers and the verl job all start runs through `build_run`, so a run means the same thing
everywhere. Of the engine's modules, only this one and the verl job construct a backend; the core takes one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .coevolution import CoEvolution
from .config import RunConfig
from .control import ControlChannel
from .env.datasets import eval_questions, load_corpus, load_questions
from .env.protocol import Passage, Retriever
from .env.retrievers import build_retriever
from .events import EventSink
from .netpolicy import NetPolicy
from .optimizers import optimizer_for
from .policy import PolicyBackend
from .types import Question

if TYPE_CHECKING:
    from .backends.torch.backend import TorchBackend


@dataclass
class RunInputs:
    """The data a run trains and evaluates on."""

    train: list[Question]
    eval_sets: dict[str, list[Question]]
    corpus: list[Passage] | None


def load_inputs(config: RunConfig) -> RunInputs:
    """Training questions, evaluation benchmarks (see `eval_questions`) and the passage corpus."""
    env = config.env
    train = load_questions(env.dataset, "train")
    eval_sets = {name: eval_questions(config.eval, name) for name in config.eval.benchmarks}
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


def checkpoint_policy(
    config: RunConfig, policy_dir: Path | None, cache_dir: Path, retriever_policy: NetPolicy | None = None
) -> TorchBackend:
    """A checkpoint's policy (its `policy/` Hugging Face directory; None = the config's own, untrained model) with the
    run's retriever, ready to `answer` (see `evaluate`)."""
    from .backends.torch.backend import TorchBackend

    corpus = None if config.env.retriever == "remote" else load_corpus(config.env.corpus)
    retriever = make_retriever(config, corpus, cache_dir, retriever_policy)
    return TorchBackend(config, retriever=retriever, cache_dir=cache_dir / "models", model_path=policy_dir)


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
    control: ControlChannel | None = None,
    inputs: RunInputs | None = None,
) -> CoEvolution:
    """Everything a run needs, wired; `backend` may be given (tests, or a backend built elsewhere, such as verl's
    policy), and so may `inputs` (default `load_inputs`; the verl job's questions are its dataset's). The policies
    confine URLs that a user chose (the retriever's, the optimizer's base URL, checked by its client on every
    request); None trusts the URL. `control` brings a person's requests (see `control`); None: nobody steers."""
    inputs = load_inputs(config) if inputs is None else inputs
    if backend is None:
        retriever = make_retriever(config, inputs.corpus, cache_dir, retriever_policy)
        backend = make_backend(config, retriever, cache_dir)
    return CoEvolution(
        config,
        backend=backend,
        train_questions=inputs.train,
        optimizer=optimizer_for(config, cache_dir, api_key, optimizer_policy),
        sink=sink,
        out_dir=out_dir,
        eval_sets=inputs.eval_sets,
        should_stop=should_stop,
        owns_run=owns_run,
        control=control,
    )
