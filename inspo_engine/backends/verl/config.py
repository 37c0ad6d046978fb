"""verl's own trainer config (`verl/trainer/config/ppo_trainer.yaml`) composed with Hydra overrides; nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def verl_config_dir() -> Path:
    """The directory of verl's trainer yaml files, in the installed verl package."""
    import verl.trainer

    return Path(verl.trainer.__file__).resolve().parent / "config"


def compose(overrides: Sequence[str], config_name: str = "ppo_trainer") -> Any:
    """The composed DictConfig, as `python -m verl.trainer.main_ppo` would build it. An override of a key that the
    yaml lacks fails here (Hydra's ConfigCompositionException), as it would on the command line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))
