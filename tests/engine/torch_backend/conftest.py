"""Fixtures for the torch backend's tests: the real SmolLM2-135M-Instruct on CPU and an in-memory retriever."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch.model import load_policy
from inspo_engine.env.protocol import Passage
from inspo_engine.models import SMOLLM2, resolve_model

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"


@pytest.fixture(scope="session")
def smollm2() -> tuple[object, object]:
    """(model, tokenizer) of SmolLM2-135M-Instruct, float32 on CPU, dequantised once into the test cache."""
    return load_policy(resolve_model(SMOLLM2, CACHE_DIR), device=torch.device("cpu"), dtype=torch.float32)


class EchoRetriever:
    """Returns k passages that repeat the query; a query containing 'everything' gets very long passages."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append(list(queries))
        return [[self.passage(query, i) for i in range(k)] for query in queries]

    @staticmethod
    def passage(query: str, i: int) -> Passage:
        text = f"Echo {i} of {query}."
        if "everything" in query:
            text = " ".join([text] * 30)
        return Passage(f"p{i}", f"Title {i}", text)
