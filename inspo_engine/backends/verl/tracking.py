"""verl's own metrics in the run's trackers, through verl's own `Tracking` class (`verl.utils.tracking`).

On a verl run the engine's events reach the trackers through `inspo_engine.tracking.TrackingSink`, as on every run.
verl's metrics (the actor's losses and clip fractions, timings, throughput, validation) are logged by verl itself:
`trainer.logger` names the run's trackers (`overrides.py`), and this module points verl's adapters into the run
directory before `fit` and fences them, so that a tracker which fails never fails the run:

- `job_tracking_environment` — where verl's adapters write: TensorBoard under `tensorboard/verl/` (beside the
  engine's own event files, so TensorBoard shows both runs), MLflow to the run's server or to `mlruns/`, W&B under
  the run directory, offline unless the job was given a key;
- `FencedTracking` — verl's `Tracking`, started one tracker at a time and logging one tracker at a time: a tracker
  that cannot start, or cannot take a step's metrics, is reported to `warn` and the others go on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from verl.utils import tracking as verl_tracking

from ...config import TrackingConfig
from ...tracking import MLFLOW_DIR, TENSORBOARD_DIR

log = logging.getLogger(__name__)

VERL_RUN = "verl"
"""The name of verl's own run beside the engine's: its TensorBoard subdirectory and its MLflow / W&B run name."""
CONSOLE = "console"
"""verl's logger that prints each step's metrics (always in `trainer.logger`)."""
TRACKER_SECRETS = ("WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN")
"""The two credentials a verl job may be given for its trackers (the team's own, named by the run)."""

Warn = Callable[[str, str], None]
"""(tracker, error) → None: how a fenced tracker's failure is reported."""

VerlTracking = verl_tracking.Tracking
"""verl's class itself, kept before `fenced_tracking` puts `FencedTracking` in its place."""


def job_tracking_environment(tracking: TrackingConfig, out_dir: Path, *, wandb_key: bool) -> dict[str, str]:
    """The variables verl's tracker adapters read, pointing them at the run: `out_dir` is the run directory and
    `wandb_key` whether the job holds a W&B key (without one W&B runs offline).

    >>> env = job_tracking_environment(TrackingConfig(backends=["tensorboard"]), Path("/runs/r"), wandb_key=False)
    >>> env["TENSORBOARD_DIR"], env["WANDB_MODE"]
    ('/runs/r/tensorboard/verl', 'offline')
    """
    env = {
        "TENSORBOARD_DIR": str(out_dir / TENSORBOARD_DIR / VERL_RUN),
        "WANDB_DIR": str(out_dir),
        "WANDB_MODE": "online" if wandb_key else "offline",
        "WANDB_SILENT": "true",
    }
    if tracking.mlflow_uri:
        env["MLFLOW_TRACKING_URI"] = tracking.mlflow_uri
    else:
        env["MLFLOW_TRACKING_URI"] = (out_dir / MLFLOW_DIR).resolve().as_uri()
        env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return env


class FencedTracking(verl_tracking.Tracking):
    """verl's `Tracking` with each tracker started and fed on its own: a failure warns (`warn`) and that tracker
    is left out, never the run. `warn` is set on the class by `fenced_tracking`, since verl constructs it."""

    warn: Warn | None = None

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | list[str] = CONSOLE,
        config: Any = None,
    ) -> None:
        super().__init__(project_name, experiment_name, default_backend=[], config=config)
        for backend in [default_backend] if isinstance(default_backend, str) else list(default_backend):
            try:
                one = VerlTracking(project_name, experiment_name, default_backend=[backend], config=config)
            except Exception as error:  # a tracker's library or server: the run goes on without it
                self._failed(backend, error)
                continue
            self.logger.update(one.logger)
            if backend == CONSOLE:
                self.console_logger = one.console_logger
            one.logger = {}  # the adapters are ours now: `one` must not finish them when it is collected
            one._finished = True

    def log(self, data: dict[str, Any], step: int, backend: Any = None) -> None:
        for name, adapter in list(self.logger.items()):
            if backend is not None and name not in backend:
                continue
            try:
                adapter.log(data=data, step=step)
            except Exception as error:
                self._failed(name, error)

    def _failed(self, backend: str, error: BaseException) -> None:
        message = f"verl's {backend} logger: {type(error).__name__}: {error}"[:500]
        log.warning("%s", message)
        warn = type(self).warn
        if warn is not None:
            warn(backend, message)


@contextlib.contextmanager
def fenced_tracking(warn: Warn) -> Iterator[type[FencedTracking]]:
    """verl's `Tracking` is `FencedTracking` (reporting to `warn`) inside the block: `RayPPOTrainer.fit` imports it
    from `verl.utils.tracking` when it starts."""
    fenced = type("FencedTracking", (FencedTracking,), {"warn": staticmethod(warn)})
    verl_tracking.Tracking = fenced
    try:
        yield fenced
    finally:
        verl_tracking.Tracking = VerlTracking
