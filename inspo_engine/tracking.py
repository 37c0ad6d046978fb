"""Experiment trackers (MLflow, W&B, TensorBoard) as an EventSink: it turns the run's events into metrics, texts
and artifacts and sends them to each tracker the config names; it knows the trackers' client libraries (imported
only when named), never the web app, the database or where keys are stored.

What reaches a tracker: every step's metrics and timings; each instruction's weight and sampling share; evolution
counts (proposed, verified, rejected, pruned, added); evaluations; the collapse alarm; the config (as parameters and
`config.json`); and at the end the best instruction (`best_instruction.txt`) and the population as the run knew it
(`population.json`). A tracker that fails never fails the run: the sink emits `TrackerFailed` to its `warn` sink,
keeps what it could not send, and tries again at the next step.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .config import FieldError, RunConfig, TrackingConfig
from .events import (
    EvalCompleted,
    Event,
    EventSink,
    InstructionAdded,
    InstructionProposed,
    InstructionPruned,
    InstructionVerified,
    PopulationChanged,
    PopulationCollapsed,
    PopulationDiversity,
    PopulationRecovered,
    RunFailed,
    RunFinished,
    RunStarted,
    StepCompleted,
    TrackerFailed,
)

PACKAGES = {
    "mlflow": ("mlflow", "mlflow-skinny"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
}
"""Tracker → (module it imports, the package that provides it); all three are the `tracking` extra."""
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
MAX_PENDING = 10_000
"""Records kept for a tracker that is failing; the oldest are dropped beyond this."""
PARAM_CHARS = 500
"""MLflow parameters are short strings: longer config values (instructions) are cut; config.json has them whole."""
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
"""MLflow's HTTP settings (it reads only the environment) unless the operator set them: one retry, 10 s timeouts;
a tracker that failed is tried again at the next step anyway."""
MLFLOW_STATUS = {"finished": "FINISHED", "cancelled": "KILLED"}
"""RunFinished's status → the MLflow run's; a failed run (RunFailed) is FAILED, and so is W&B's exit code."""


def package_errors(tracking: TrackingConfig) -> list[FieldError]:
    """One error per tracker whose package is not installed here, naming the package.

    >>> package_errors(TrackingConfig(backends=[]))
    []
    """
    missing = [PACKAGES[name][1] for name in tracking.backends if importlib.util.find_spec(PACKAGES[name][0]) is None]
    if not missing:
        return []
    message = f"needs the Python package {', '.join(missing)} (install the 'tracking' extra)"
    return [FieldError("tracking.backends", message)]


# -- what a tracker receives -------------------------------------------------------------------------------------


@dataclass
class Record:
    """One thing to send, whatever the tracker: scalars at a step, texts, parameters, files, or the end."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    """File name → text content."""
    finished: str | None = None
    """The run's final status ('finished', 'cancelled' or 'failed'); the tracker closes its run."""


class Tracker(Protocol):
    """One tracker's client: `send` raises on any failure, and may be called again with the same record."""

    name: str

    def send(self, record: Record) -> None: ...

    def close(self) -> None: ...


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys.

    >>> flatten({"grpo": {"lr": 1e-05, "loss": "grpo"}, "seed": 0})
    {'grpo.lr': 1e-05, 'grpo.loss': 'grpo', 'seed': 0}
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


# -- events → records --------------------------------------------------------------------------------------------


class Translator:
    """Turns events into records; keeps what the end needs (the instructions' texts, the last weights) and the
    running counts of evolution events."""

    def __init__(self) -> None:
        self.instructions: dict[str, dict[str, Any]] = {}
        self.members: dict[str, dict[str, float]] = {}
        self.counts = {"proposed": 0, "verified": 0, "rejected": 0, "pruned": 0, "added": 0}
        self.step = 0

    def records(self, event: Event) -> list[Record]:
        self.step = max(self.step, int(getattr(event, "step", self.step)))
        handler = self._handlers().get(type(event))
        return handler(event) if handler is not None else []

    def _handlers(self) -> dict[type, Callable[[Any], list[Record]]]:
        return {
            RunStarted: self._started,
            StepCompleted: self._step,
            PopulationChanged: self._population,
            PopulationDiversity: self._diversity,
            PopulationCollapsed: lambda e: [Record(e.step, {"alarm/collapsed": 1.0}, {"alarm": _collapse_text(e)})],
            PopulationRecovered: lambda e: [Record(e.step, {"alarm/collapsed": 0.0})],
            InstructionAdded: self._added,
            InstructionProposed: lambda e: self._count(e.step, proposed=len(e.candidates)),
            InstructionVerified: self._verified,
            InstructionPruned: lambda e: self._count(e.step, pruned=1),
            EvalCompleted: self._evaluated,
            RunFinished: self._finished,
            RunFailed: lambda e: [Record(e.step, texts={"error": e.error}, finished="failed")],
        }

    def _started(self, event: RunStarted) -> list[Record]:
        params = flatten(event.config) | {"backend": event.backend}
        return [Record(self.step, params=params, artifacts={"config.json": json.dumps(event.config, indent=2)})]

    def _step(self, event: StepCompleted) -> list[Record]:
        metrics = {
            "reward_mean": event.reward_mean,
            "reward_std": event.reward_std,
            "tool_calls_mean": event.tool_calls_mean,
            "response_length_mean": event.response_length_mean,
            "instruction_length_mean": event.instruction_length_mean,
        }
        metrics |= {f"train/{key}": value for key, value in event.metrics.items()}
        metrics |= {f"time/{key}": value for key, value in event.timings.items()}
        metrics |= {f"overhead/{key}": float(value) for key, value in vars(event.overhead).items()}
        return [Record(event.step, metrics)]

    def _population(self, event: PopulationChanged) -> list[Record]:
        self.members = {m.id: {"weight": m.weight, "share": m.probability} for m in event.members}
        metrics = {"population/size": float(len(event.members))}
        for member in event.members:
            metrics[f"instruction/{member.id}/weight"] = member.weight
            metrics[f"instruction/{member.id}/share"] = member.probability
        return [Record(event.step, metrics, {"population/best": event.best_id})]

    def _diversity(self, event: PopulationDiversity) -> list[Record]:
        values = {
            "cosine_mean": event.cosine_mean,
            "cosine_min": event.cosine_min,
            "strategies": float(event.strategies),
            "entropy_normalised": event.entropy_normalised,
        }
        return [Record(event.step, {f"diversity/{k}": v for k, v in values.items() if v is not None})]

    def _added(self, event: InstructionAdded) -> list[Record]:
        info = event.instruction
        self.instructions[info.id] = {"id": info.id, "text": info.text, "origin": info.origin}
        self.instructions[info.id] |= {"parent_id": info.parent_id, "birth_step": info.birth_step}
        return self._count(event.step, added=1)

    def _verified(self, event: InstructionVerified) -> list[Record]:
        accepted = sum(1 for c in event.candidates if c.accepted)
        return self._count(event.step, verified=accepted, rejected=len(event.candidates) - accepted)

    def _count(self, step: int, **increments: int) -> list[Record]:
        for key, value in increments.items():
            self.counts[key] += value
        return [Record(step, {f"evolution/{key}": float(self.counts[key]) for key in increments})]

    def _evaluated(self, event: EvalCompleted) -> list[Record]:
        metrics = {f"eval/{event.benchmark}/{event.metric}": event.value}
        if event.f1 is not None:
            metrics[f"eval/{event.benchmark}/f1"] = event.f1
        return [Record(event.step, metrics)]

    def _finished(self, event: RunFinished) -> list[Record]:
        population = [self.instructions.get(i, {"id": i}) | stats for i, stats in self.members.items()]
        artifacts = {
            "best_instruction.txt": event.best_instruction + "\n",
            "population.json": json.dumps({"step": event.step, "best_id": event.best_instruction_id,
                                           "instructions": population}, indent=2),
        }  # fmt: skip
        return [Record(event.step, artifacts=artifacts, finished=event.status)]


def _collapse_text(event: PopulationCollapsed) -> str:
    return f"population collapsed since step {event.since_step} ({', '.join(event.reasons)})"


# -- the trackers ------------------------------------------------------------------------------------------------


class TensorBoardTracker:
    """Event files under `tensorboard/` of the run directory (torch's SummaryWriter): scalars and texts; artifacts
    as texts."""

    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))

    def send(self, record: Record) -> None:
        for tag, value in record.metrics.items():
            self.writer.add_scalar(tag, value, record.step)
        texts = record.texts | {f"params/{k}": str(v) for k, v in record.params.items()} | record.artifacts
        for tag, text in texts.items():
            self.writer.add_text(tag, text, record.step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` for the block only (nothing when `value` is None), then what it was before."""
    if value is None:
        yield
        return
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


class MlflowTracker:
    """One MLflow run in experiment `project`: metrics by step, parameters, texts and artifacts as files. `uri`
    None: a file store in the run directory's `mlruns/` (which MLflow 3 keeps only with MLFLOW_ALLOW_FILE_STORE
    set, so this sets it when unset).

    `token` is the server's bearer token. MLflow's client reads credentials only from the environment, at each
    request, so the token is there only while this tracker's own requests are made (`_environment`): a later run
    in the same worker process never sends it."""

    name = "mlflow"

    def __init__(
        self, uri: str | None, run_dir: Path, *, project: str, run_name: str, token: str | None = None
    ) -> None:
        from mlflow.tracking import MlflowClient

        self.token = token
        if uri is None:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (run_dir / MLFLOW_DIR).resolve().as_uri()
        else:  # a server that is down costs the run seconds per step, not MLflow's default minutes of retries
            for name, value in MLFLOW_HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.uri, self.project, self.run_name = uri, project, run_name
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id: str | None = None

    def _run(self) -> str:
        """The run, created at the first send that reaches the server (so a server down at the start is retried)."""
        if self.run_id is None:
            experiment = self.client.get_experiment_by_name(self.project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(self.project)
            self.run_id = self.client.create_run(experiment_id, run_name=self.run_name).info.run_id
        return self.run_id

    def send(self, record: Record) -> None:
        with _environment("MLFLOW_TRACKING_TOKEN", self.token):
            self._send(record)

    def _send(self, record: Record) -> None:
        from mlflow.entities import Metric, Param

        run_id = self._run()
        now = _millis()
        metrics = [Metric(key, float(value), now, record.step) for key, value in record.metrics.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000])
        params = [Param(key, str(value)[:PARAM_CHARS]) for key, value in record.params.items()]
        for start in range(0, len(params), 100):
            self.client.log_batch(run_id, params=params[start : start + 100])
        for name, text in record.texts.items():
            self.client.log_text(run_id, text, f"texts/step-{record.step:06d}/{name.replace('/', '_')}.txt")
        for name, text in record.artifacts.items():
            self.client.log_text(run_id, text, name)
        if record.finished is not None:
            self.client.set_terminated(run_id, MLFLOW_STATUS.get(record.finished, "FAILED"))

    def close(self) -> None:
        return None


class WandbTracker:
    """One W&B run in `project`, offline (its run directory under the run directory's `wandb/`) when no key is
    given; the key goes to W&B's settings, never to the environment or a netrc file."""

    name = "wandb"

    def __init__(self, run_dir: Path, *, project: str, run_name: str, api_key: str | None) -> None:
        import wandb

        settings = wandb.Settings(
            api_key=api_key, silent=True, console="off", x_disable_stats=True, x_disable_meta=True
        )
        self.wandb = wandb
        self.run = wandb.init(
            project=project,
            name=run_name,
            dir=str(run_dir),
            mode="online" if api_key else "offline",
            settings=settings,
            reinit="create_new",
        )
        self.step = 0

    def send(self, record: Record) -> None:
        self.step = max(self.step, record.step)  # W&B takes steps in order only
        if record.params:
            self.run.config.update(record.params, allow_val_change=True)  # type: ignore[no-untyped-call]
        if record.metrics or record.texts:
            self.run.log(dict(record.metrics) | dict(record.texts), step=self.step)
        if record.artifacts:
            artifact = self.wandb.Artifact(f"{self.run.id}-files", type="run-files")
            for name, text in record.artifacts.items():
                with artifact.new_file(name, encoding="utf-8") as handle:
                    handle.write(text)
            self.run.log_artifact(artifact)
        if record.finished is not None:
            self.run.finish(exit_code=0 if record.finished in MLFLOW_STATUS else 1)

    def close(self) -> None:
        self.run.finish()


def _millis() -> int:
    import time

    return int(time.time() * 1000)


# -- the sink ----------------------------------------------------------------------------------------------------


@dataclass
class _Slot:
    """A tracker (or the error that kept it from starting), with what it has not taken yet."""

    name: str
    start: Callable[[], Tracker]
    tracker: Tracker | None = None
    pending: list[Record] = field(default_factory=list)
    failing: bool = False


class TrackingSink:
    """The EventSink that feeds the trackers of `config.tracking`. Each tracker starts at the first event; a
    tracker that raises (starting or sending) gets a `TrackerFailed` event on `warn`, keeps its records, and is tried
    again at the next step (a `StepCompleted`) or at the end of the run, never more often."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        *,
        run_name: str,
        warn: EventSink | None = None,
        wandb_key: str | None = None,
        mlflow_token: str | None = None,
        trackers: dict[str, Callable[[], Tracker]] | None = None,
    ) -> None:
        """`trackers` replaces the built-in constructors by name (a test's failing tracker)."""
        tracking = config.tracking
        makers: dict[str, Callable[[], Tracker]] = {
            "tensorboard": lambda: TensorBoardTracker(run_dir / TENSORBOARD_DIR),
            "mlflow": lambda: MlflowTracker(
                tracking.mlflow_uri, run_dir, project=tracking.project, run_name=run_name, token=mlflow_token
            ),
            "wandb": lambda: WandbTracker(run_dir, project=tracking.project, run_name=run_name, api_key=wandb_key),
        }
        makers.update(trackers or {})
        self.slots = [_Slot(name, makers[name]) for name in tracking.backends]
        self.translator = Translator()
        self.warn = warn

    def emit(self, event: Event) -> None:
        records = self.translator.records(event)
        retry = isinstance(event, StepCompleted | RunFinished | RunFailed)
        for slot in self.slots:
            slot.pending = (slot.pending + records)[-MAX_PENDING:]
            if slot.pending and (retry or not slot.failing):
                self._deliver(slot)

    def _deliver(self, slot: _Slot) -> None:
        try:
            if slot.tracker is None:
                slot.tracker = slot.start()
            while slot.pending:
                slot.tracker.send(slot.pending[0])
                slot.pending.pop(0)
            slot.failing = False
        except Exception as error:  # any failure of a tracker's library or server: the run must go on
            slot.failing = True
            if self.warn is not None:
                message = f"{type(error).__name__}: {error}"[:500]
                self.warn.emit(TrackerFailed(step=self.translator.step, tracker=slot.name, error=message))

    def close(self) -> None:
        """Close every tracker that started (what is still pending is lost)."""
        for slot in self.slots:
            if slot.tracker is not None:
                with contextlib.suppress(Exception):  # closing a broken tracker must not fail the run either
                    slot.tracker.close()
                slot.tracker = None

    def trackers(self) -> Iterator[Tracker]:
        return (slot.tracker for slot in self.slots if slot.tracker is not None)
