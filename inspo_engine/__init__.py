"""INSPO engine: GRPO training of LLM search agents with a co-evolving instruction population; no web framework."""

from .config import RunConfig
from .config_fields import ConfigError
from .presets import preset

__all__ = ["ConfigError", "RunConfig", "preset"]
__version__ = "0.1.0"
