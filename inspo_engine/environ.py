"""What the engine's entry points (the CLI, the verl launcher and the verl job) take from their environment: the
optimizer's API key and the cache directory. The library itself reads no environment variable: these functions
are handed the environment by the entry point that owns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .config import OptimizerConfig

API_KEY_VARIABLE = "INSPO_OPTIMIZER_API_KEY"
"""The key for whatever URL the config names; the one optimizer key a verl job gets (when its optimizer needs one)."""
CACHE_DIR_VARIABLE = "INSPO_CACHE_DIR"
"""Models and indexes; `cache` (relative to the working directory) when unset."""


def api_key_from_env(optimizer: OptimizerConfig, environ: Mapping[str, str]) -> str | None:
    """The optimizer's key: INSPO_OPTIMIZER_API_KEY when set (the key for whatever URL the config names); else
    GEMINI_API_KEY (or GOOGLE_API_KEY) only for Google's own endpoint, never for a `base_url`; OPENAI_API_KEY for
    the openai provider, whose base_url the person running the command chose.

    >>> api_key_from_env(OptimizerConfig(provider="gemini", base_url="http://x"), {"GEMINI_API_KEY": "k"}) is None
    True
    """
    explicit = environ.get(API_KEY_VARIABLE)
    if explicit:
        return explicit
    if optimizer.provider == "gemini" and not optimizer.base_url:
        return environ.get("GEMINI_API_KEY") or environ.get("GOOGLE_API_KEY")
    if optimizer.provider == "openai":
        return environ.get("OPENAI_API_KEY")
    return None


def cache_dir_from_env(environ: Mapping[str, str]) -> Path:
    """Where models and indexes are cached: INSPO_CACHE_DIR, else `cache`."""
    return Path(environ.get(CACHE_DIR_VARIABLE, "cache"))
