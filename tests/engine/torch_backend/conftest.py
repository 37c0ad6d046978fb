"""Fixtures for the torch backend's tests: the real SmolLM2-135M-Instruct on CPU and an in-memory retriever."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch.model import load_policy
from inspo_engine.backends.torch.rollout_weights import _PackedLinear
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


def packed_layers(model: torch.nn.Module) -> dict[str, _PackedLinear]:
    """A rollout copy's packed linear layers by name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, _PackedLinear)}


def freed_weights(rollout: torch.nn.Module) -> list[str]:
    """The rollout copy's weights with no plain storage: those only their packed layer reads."""
    return [name for name, p in rollout.named_parameters() if p.numel() == 0]


def copy_mismatches(rollout: torch.nn.Module, policy: torch.nn.Module) -> list[str]:
    """The names of the rollout copy's parameters that do not hold the policy's, rounded to bfloat16; a weight whose
    plain storage is freed (0.21 GB of SmolLM2's) counts as held when its packed layout computes with the policy's."""
    packed, wrong = packed_layers(rollout), []
    for (name, mine), theirs in zip(rollout.named_parameters(), policy.parameters(), strict=True):
        expected = theirs.detach().to(torch.bfloat16)
        if mine.numel() == 0 and name.removesuffix(".weight") in packed:
            module = packed[name.removesuffix(".weight")]
            hidden = torch.randn(3, expected.shape[1], generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
            with torch.inference_mode():
                same = torch.equal(module(hidden), torch.nn.functional.linear(hidden, expected, module.bias))
        else:
            same = mine.shape == expected.shape and torch.equal(mine, expected)
        if not same:
            wrong.append(name)
    return wrong
