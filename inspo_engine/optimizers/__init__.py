"""Optimizer LLM clients, ``build_optimizer`` and ``optimizer_for`` (a run's client); they answer prompts and know
nothing of instructions or evolution."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from inspo_engine.models import resolve_model
from inspo_engine.optimizers.base import (
    Completion,
    HttpSettings,
    OptimizerBudget,
    OptimizerClient,
    OptimizerError,
    call_with_retries,
)
from inspo_engine.optimizers.gemini import GeminiClient
from inspo_engine.optimizers.local import LocalModelClient
from inspo_engine.optimizers.openai_compat import OpenAICompatibleClient
from inspo_engine.optimizers.rules import RuleBasedClient
from inspo_engine.schedule import needs_optimizer

if TYPE_CHECKING:
    from inspo_engine.config import OptimizerConfig, RunConfig
    from inspo_engine.netpolicy import NetPolicy

__all__ = [
    "Completion",
    "GeminiClient",
    "HttpSettings",
    "LocalModelClient",
    "OpenAICompatibleClient",
    "OptimizerBudget",
    "OptimizerClient",
    "OptimizerError",
    "RuleBasedClient",
    "build_optimizer",
    "call_with_retries",
    "optimizer_for",
]


def optimizer_for(
    config: RunConfig, cache_dir: Path, api_key: str | None, policy: NetPolicy | None = None
) -> OptimizerClient | None:
    """A run's optimizer client, or None when its config never asks one anything; a local model named by id is
    resolved under `cache_dir`. `policy` checks a base URL that the caller did not choose itself."""
    if not needs_optimizer(config):
        return None
    optimizer = config.optimizer
    if optimizer.provider == "local" and optimizer.local_model_path:
        local_path = resolve_model(optimizer.local_model_path, cache_dir / "models")
        optimizer = replace(optimizer, local_model_path=str(local_path))
    return build_optimizer(optimizer, api_key=api_key, seed=config.seed, policy=policy)


def build_optimizer(
    config: OptimizerConfig, *, api_key: str | None = None, seed: int = 0, policy: NetPolicy | None = None
) -> OptimizerClient:
    """The client ``config.provider`` names; ``api_key`` comes from the caller; the engine reads no env vars.

    ``policy`` checks ``base_url`` (now and on every request) when the caller did not choose the URL itself.
    """
    if config.provider == "gemini":
        if not api_key:
            raise ValueError(
                'The "gemini" optimizer needs an API key: pass GEMINI_API_KEY (api_key=...), or choose '
                'provider "local" (a weak local model) or "openai" (an OpenAI-compatible endpoint).'
            )
        return GeminiClient(HttpSettings.from_config(config, api_key=api_key, policy=policy))
    if config.provider == "openai":
        if not config.base_url:
            raise ValueError('The "openai" optimizer needs base_url, e.g. "http://localhost:8000/v1".')
        return OpenAICompatibleClient(HttpSettings.from_config(config, api_key=api_key, policy=policy))
    if config.provider == "local":
        if not config.local_model_path:
            raise ValueError('The "local" optimizer needs local_model_path: a directory holding a small causal LM.')
        return LocalModelClient(
            model_path=config.local_model_path,
            max_new_tokens=config.local_max_new_tokens,
            temperature=config.temperature,
        )
    if config.provider == "rules":
        return RuleBasedClient(seed=seed)
    raise ValueError(f'Unknown optimizer provider {config.provider!r}; choose "gemini", "openai", "local" or "rules".')
