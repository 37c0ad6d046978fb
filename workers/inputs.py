"""A stored run's config as a worker uses it, the one way for training, evaluation and heatmaps: checked again
(paths confined to the team's data, data references pinned) and with the data it names fetched into the local
cache; evaluated benchmarks likewise, with the map from local paths back to the names they were given."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from inspo_engine.config import RunConfig
from webapp.data.references import data_local_benchmarks, data_materialize
from webapp.runs.configs import benchmark_paths, config_confine
from webapp.runs.models import Run


def stored_config(run: Run) -> tuple[RunConfig, dict[str, str]]:
    """The run's stored config admitted again, once (`config_confine`: data pinned, paths confined, built and
    validated by the engine), with its data local; and the map from local paths to data references."""
    config = config_confine(run.config, team=run.team).config
    return data_materialize(config, team=run.team, cache_dir=Path(settings.INSPO_CACHE_DIR))


def local_benchmarks(run: Run, names: list[str], *, field: str = "benchmarks") -> tuple[list[str], dict[str, str]]:
    """Benchmarks a request names for the run: confined, data references pinned and fetched; and the map back."""
    confined = benchmark_paths(names, team=run.team, field=field)
    return data_local_benchmarks(confined, team=run.team, cache_dir=Path(settings.INSPO_CACHE_DIR))
