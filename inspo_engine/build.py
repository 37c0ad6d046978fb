"""Builds a ready-to-run CoEvolution from a RunConfig (data, retriever, backend and optimizer), and a checkpoint's
policy to evaluate; it trains nothing.

The CLI, the web app's workers and the verl job all start runs through `build_run`, so a run means the same thing
everywhere. Of the engine's modules, only this one and the verl job construct a backend; the core takes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .coevolution import CoEvolution
from .config import RunConfig
from .control import ControlChannel
from .env.datasets import eval_questions, load_questions
from .env.indexes import CorpusIndex, build_index, corpus_file
from .env.protocol import Retriever
from .env.retrievers import RemoteRetriever, embed_texts
from .events import EventSink
from .netpolicy import NetPolicy
from .optimizers import optimizer_for
from .policy import PolicyBackend
from .types import Question

if TYPE_CHECKING:
    from .backends.torch.backend import TorchBackend


SERVICE_RETRIES = 4
"""Attempts after the first when the retrieval service cannot be reached (1, 2, 4, 8 s apart), then the run fails."""


@dataclass
class RunInputs:
    """The questions a run trains and evaluates on (its corpus stays on disk: see `make_retriever`)."""

    train: list[Question]
    eval_sets: dict[str, list[Question]]


def load_inputs(config: RunConfig) -> RunInputs:
    """Training questions and evaluation benchmarks (see `eval_questions`)."""
    train = load_questions(config.env.dataset, "train")
    eval_sets = {name: eval_questions(config.eval, name) for name in config.eval.benchmarks}
    return RunInputs(train=train, eval_sets=eval_sets)


def make_retriever(
    config: RunConfig, cache_dir: Path, policy: NetPolicy | None = None, *, service: str | None = None
) -> Retriever:
    """The run's retriever. `remote`: the user's /retrieve server, checked against `policy`. `bm25` and `dense`: the
    corpus's index under `cache_dir/indexes` (built here when no index job has built it), searched by the retrieval
    service at `service` when one is given (an operator's address, trusted), else in this process; either way the
    corpus stays on disk."""
    env = config.env
    if env.retriever == "remote":
        if not env.retriever_url:
            raise ValueError("a remote retriever needs the URL of a /retrieve server")
        return RemoteRetriever(env.retriever_url, policy=policy)
    root = cache_dir / "indexes"
    encode = embed_texts if env.retriever == "dense" else None
    folder = build_index(env.retriever, corpus_file(env.corpus, root), root, encode=encode)
    if service:
        remote = RemoteRetriever(f"{service.rstrip('/')}/indexes/{folder.name}/retrieve", retries=SERVICE_RETRIES)
        remote.search([""], 1)  # the service opens the index now, and a service that is down fails the run at once
        return remote
    return CorpusIndex(folder, encode=encode)


def make_backend(config: RunConfig, retriever: Retriever, cache_dir: Path) -> PolicyBackend:
    if config.backend.name != "torch":
        raise ValueError(f"backend {config.backend.name!r} runs on the GPU queue; this process runs 'torch' only")
    from .backends.torch.backend import TorchBackend

    return TorchBackend(config, retriever=retriever, cache_dir=cache_dir / "models")


def checkpoint_policy(
    config: RunConfig,
    policy_dir: Path | None,
    cache_dir: Path,
    retriever_policy: NetPolicy | None = None,
    retrieval_service: str | None = None,
) -> TorchBackend:
    """A checkpoint's policy (its `policy/` Hugging Face directory; None = the config's own, untrained model) with the
    run's retriever, ready to `answer` (see `evaluate`)."""
    from .backends.torch.backend import TorchBackend

    retriever = make_retriever(config, cache_dir, retriever_policy, service=retrieval_service)
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
    retrieval_service: str | None = None,
    benchmark_names: Mapping[str, str] | None = None,
) -> CoEvolution:
    """Everything a run needs, wired; `backend` may be given (tests, or a backend built elsewhere, such as verl's
    policy), and so may `inputs` (default `load_inputs`; the verl job's questions are its dataset's). The policies
    confine URLs that a user chose (the retriever's, the optimizer's base URL, checked by its client on every
    request); None trusts the URL. `control` brings a person's requests (see `control`); None: nobody steers.
    `retrieval_service`: the operator's retrieval service, which searches the run's corpus (see `make_retriever`).
    `benchmark_names`: what each evaluation set's files are named by (see `CoEvolution`)."""
    inputs = load_inputs(config) if inputs is None else inputs
    if backend is None:
        retriever = make_retriever(config, cache_dir, retriever_policy, service=retrieval_service)
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
        benchmark_names=benchmark_names,
    )
