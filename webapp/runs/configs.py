"""Engine configs from what a user sends: a preset, a partial config, overrides. The engine validates them; this
module merges the inputs, adds the platform's one rule (where file paths may point), and turns errors into
field errors."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from inspo_engine.config import PRESETS, ConfigError, RunConfig
from webapp.core.errors import InvalidInput

PRESET_NAMES = tuple(PRESETS)


def config_errors(error: ConfigError) -> InvalidInput:
    """The engine's errors keyed by dotted field path, under `config`."""
    errors: dict[str, list[str]] = {}
    for item in error.errors:
        errors.setdefault(item.field or "config", []).append(item.message)
    return InvalidInput(errors, key="config")


def preset_dict(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise InvalidInput({"preset": [f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}"]})
    return copy.deepcopy(PRESETS[name]())


def config_compose(
    *,
    preset: str | None = None,
    base: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RunConfig:
    """preset ⊕ base (a partial config, merged section by section) ⊕ overrides (`grpo.lr` or paper names)."""
    data = preset_dict(preset) if preset else {}
    _merge(data, dict(base or {}))
    try:
        config = RunConfig.from_dict(data)
        return config.with_overrides(dict(overrides)) if overrides else config
    except ConfigError as error:
        raise config_errors(error) from error


def config_validate(data: Mapping[str, Any]) -> RunConfig:
    """The engine's validation, plus the platform's rule on file paths."""
    try:
        config = RunConfig.from_dict(copy.deepcopy(dict(data)))
    except ConfigError as error:
        raise config_errors(error) from error
    named = [(field, _get(config, field)) for field in PATH_FIELDS]
    named += [("eval.benchmarks", name) for name in config.eval.benchmarks]
    errors = paths_outside_data_dir(named)
    if errors:
        raise InvalidInput(errors, key="config")
    return config


# Config fields that may name files on the workers' disks.
PATH_FIELDS = ("env.dataset", "env.corpus", "backend.model", "optimizer.local_model_path")


def paths_outside_data_dir(named: list[tuple[str, str | None]]) -> dict[str, list[str]]:
    """Teams share workers, so a config may name a file by absolute path (or climb with '..') only inside
    INSPO_DATA_DIR; names such as 'builtin' or a hub id pass."""
    data_dir = Path(settings.INSPO_DATA_DIR).resolve()
    errors: dict[str, list[str]] = {}
    for field, value in named:
        if not value:
            continue
        path = Path(value)
        if (path.is_absolute() or ".." in path.parts) and not path.resolve().is_relative_to(data_dir):
            errors.setdefault(field, []).append(f"{value!r}: file paths must lie under {data_dir}")
    return errors


def _get(config: RunConfig, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _merge(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
