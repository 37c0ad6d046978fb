"""Fixtures for the verl backend's tests: the session's tiny random-weight Llama over SmolLM2's
tokenizer, a fake verl server manager that generates with it, and a real /retrieve server."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.env.server import make_retrieval_server


@pytest.fixture(scope="session")
def tokenizer(tiny_llama_dir: Path) -> Any:
    """SmolLM2's tokenizer, as saved beside the session's tiny Llama."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_llama_dir: Path) -> Any:
    """The session's tiny random-weight Llama over SmolLM2's vocabulary (`tiny_llama_dir`): real forward passes,
    nonsense text."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(tiny_llama_dir).eval()


class EchoRetriever:
    """k passages that repeat the query; a query containing 'everything' gets very long passages."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.queries += queries
        out = []
        for query in queries:
            text = f"Echo of {query}." * (60 if "everything" in query else 1)
            out.append([Passage(f"p{i}", f"Title {i}", text) for i in range(k)])
        return out


@pytest.fixture
def retrieval_server() -> Iterator[tuple[str, EchoRetriever]]:
    """A real Search-R1 /retrieve HTTP server on a free local port over an EchoRetriever."""
    retriever = EchoRetriever()
    served: Retriever = retriever
    server = make_retrieval_server(served, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}/retrieve", retriever
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
