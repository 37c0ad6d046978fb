"""verl's own metrics in the run's trackers: `trainer.logger` names them (keys and names verl 0.9.1 knows), verl's
own `Tracking` writes into the run directory (TensorBoard events read back with EventAccumulator, the MLflow file
store with MlflowClient, W&B's offline run), and a tracker that cannot start warns while the others go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.verl._support import require_verl

require_verl()

from verl.utils import tracking as verl_tracking  # noqa: E402

from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.overrides import verl_overrides  # noqa: E402
from inspo_engine.backends.verl.tracking import (  # noqa: E402
    VERL_RUN,
    VerlTracking,
    fenced_tracking,
    job_tracking_environment,
)
from inspo_engine.config import TRACKERS, RunConfig  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402

METRICS = [{"actor/pg_loss": 0.5, "timing_s/step": 3.0}, {"actor/pg_loss": 0.25, "timing_s/step": 2.0}]


def test_every_tracker_is_a_logger_verl_knows_and_the_run_names_them_with_its_project() -> None:
    assert set(TRACKERS) <= set(VerlTracking.supported_backend)
    config = preset("paper").with_overrides({"tracking.backends": list(TRACKERS), "tracking.project": "agents"})
    trainer = compose(verl_overrides(config)).trainer
    assert list(trainer.logger) == ["console", *TRACKERS] and trainer.project_name == "agents"
    assert list(compose(verl_overrides(preset("paper"))).trainer.logger) == ["console"]


def _log_through_verl(run_dir: Path, backends: list[str], monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What `RayPPOTrainer.fit` does with its logger, inside the fence, in the job's environment; the warnings."""
    tracking = RunConfig.from_dict({"tracking": {"backends": backends, "project": "agents"}}).tracking
    for name, value in job_tracking_environment(tracking, run_dir, wandb_key=False).items():
        monkeypatch.setenv(name, value)
    warnings: list[tuple[str, str]] = []
    with fenced_tracking(lambda tracker, error: warnings.append((tracker, error))):
        from verl.utils.tracking import Tracking  # as fit imports it

        logger = Tracking("agents", "run-1", default_backend=["console", *backends], config={"trainer": {}})
        for step, metrics in enumerate(METRICS, start=1):
            logger.log(data=metrics, step=step)
        logger.finish()
    assert verl_tracking.Tracking is VerlTracking  # the fence is gone after the block
    return warnings


def test_verls_own_tracking_writes_tensorboard_and_mlflow_into_the_run_directory(tmp_path, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert _log_through_verl(tmp_path, ["tensorboard", "mlflow"], monkeypatch) == []
    events = EventAccumulator(str(tmp_path / "tensorboard" / VERL_RUN))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("actor/pg_loss")] == [(1, 0.5), (2, 0.25)]
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("agents")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "actor/pg_loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]


def test_verls_wandb_logger_runs_offline_in_the_run_directory_without_a_key(tmp_path, monkeypatch) -> None:
    import wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    wandb.teardown()  # W&B reads WANDB_MODE when it is first set up: start as the job's fresh process does
    assert _log_through_verl(tmp_path, ["wandb"], monkeypatch) == []
    (offline,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(offline.glob("*.wandb"))


def test_a_tracker_that_cannot_start_warns_and_the_others_still_log(tmp_path, monkeypatch) -> None:
    (tmp_path / "tensorboard").write_text("a file where verl's TensorBoard directory should go")
    warnings = _log_through_verl(tmp_path, ["tensorboard", "mlflow"], monkeypatch)
    assert [tracker for tracker, _ in warnings] == ["tensorboard"]
    assert "verl's tensorboard logger" in warnings[0][1]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("agents")
    assert experiment is not None and len(client.search_runs([experiment.experiment_id])) == 1
