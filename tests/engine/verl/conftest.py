"""Fixtures for the verl backend's tests: the SmolLM2 tokenizer the project ships, a tiny randomly initialised
Llama with its vocabulary, a fake verl server manager that generates with it, and a real /retrieve server."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.env.server import make_retrieval_server
from inspo_engine.models import SMOLLM2, resolve_model

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory (dequantised once from the packaged GGUF file)."""
    return resolve_model(SMOLLM2, CACHE_DIR)


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def tiny_model(tokenizer: Any) -> Any:
    """A 2-layer, 64-wide Llama with random weights over SmolLM2's vocabulary: real forward passes, nonsense text."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config).eval()


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
