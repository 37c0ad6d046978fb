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
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from .config import RunConfig, TrackingConfig
from .config_fields import FieldError
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
from .netpolicy import GuardedTransport, NetPolicy, parse_target

PACKAGES = {
    "mlflow": ("mlflow", "mlflow-skinny"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
}
"""Tracker → (module it imports, the package that provides it); all three are the `tracking` extra."""
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
log = logging.getLogger(__name__)
MAX_PENDING = 10_000
"""Records kept for a tracker that is failing; the oldest are dropped beyond this."""
PARAM_CHARS = 500
"""MLflow parameters are short strings: longer config values (instructions) are cut; config.json has them whole."""
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
    """One tracker's client: `send` raises on any failure, and may be called again with the same record. `remote`:
    it talks to a server, so a library's error text (which may hold what the server wrote) is not shown to users."""

    name: str
    remote: bool

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
    remote = False

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


class TrackerError(RuntimeError):
    """A tracker's failure in words of ours: the URL and the HTTP status, never what a foreign server wrote."""


class MlflowTracker:
    """One MLflow run in experiment `project` in a file store: the run directory's `mlruns/` (which MLflow 3 keeps
    only with MLFLOW_ALLOW_FILE_STORE set, so this sets it when unset); metrics by step, parameters, texts and
    artifacts as files. A server (`tracking.mlflow_uri`) is `MlflowRestTracker`'s."""

    name = "mlflow"
    remote = False

    def __init__(self, run_dir: Path, *, project: str, run_name: str) -> None:
        from mlflow.tracking import MlflowClient

        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri, self.project, self.run_name = (run_dir / MLFLOW_DIR).resolve().as_uri(), project, run_name
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id: str | None = None

    def _run(self) -> str:
        """The run, created at the first send."""
        if self.run_id is None:
            experiment = self.client.get_experiment_by_name(self.project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(self.project)
            self.run_id = self.client.create_run(experiment_id, run_name=self.run_name).info.run_id
        return self.run_id

    def send(self, record: Record) -> None:
        from mlflow.entities import Metric, Param

        run_id = self._run()
        now = _millis()
        metrics = [Metric(key, float(value), now, record.step) for key, value in record.metrics.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000])
        params = [Param(key, str(value)[:PARAM_CHARS]) for key, value in record.params.items()]
        for start in range(0, len(params), 100):
            self.client.log_batch(run_id, params=params[start : start + 100])
        for name, text in _files(record).items():
            self.client.log_text(run_id, text, name)
        if record.finished is not None:
            self.client.set_terminated(run_id, MLFLOW_STATUS.get(record.finished, "FAILED"))

    def close(self) -> None:
        return None


def _files(record: Record) -> dict[str, str]:
    """The record's texts (under `texts/step-NNNNNN/`) and artifacts, by artifact path."""
    texts = {f"texts/step-{record.step:06d}/{name.replace('/', '_')}.txt": text for name, text in record.texts.items()}
    return texts | record.artifacts


MLFLOW_API = "/api/2.0/mlflow"
MLFLOW_ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"
MLFLOW_TIMEOUT_S = 10.0


class MlflowRestTracker:
    """One MLflow run on the server at `uri`, spoken to over MLflow's REST API by our own client: every request goes
    through the network policy's `GuardedTransport` (the checked host, the address it resolved to), no redirect is
    followed (a 3xx is a failure), and the bearer `token` goes to that server only. Artifacts go through the
    server's artifact proxy (`mlflow-artifacts:`, `mlflow server`'s default); a server that stores them elsewhere
    (S3, a shared disk) gets metrics and parameters, and the first file it cannot take is reported once.

    MLflow's own client is not used for a server: it makes its own requests (with `requests`, which follows
    redirects) where no policy can reach them."""

    name = "mlflow"
    remote = True

    def __init__(self, uri: str, *, project: str, run_name: str, policy: NetPolicy, token: str | None = None) -> None:
        self.uri, self.project, self.run_name = uri.rstrip("/"), project, run_name
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            transport=GuardedTransport(policy), follow_redirects=False, timeout=MLFLOW_TIMEOUT_S, headers=headers
        )
        self.run_id: str | None = None
        self.artifact_path: str | None = None
        """The run's path under the artifact proxy; None when the server stores artifacts where we do not send."""
        self.artifacts_refused = False

    def _call(self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None) -> Any:
        url = f"{self.uri}{path}"
        try:
            response = self.http.request(method, url, json=body, params=params)
        except (httpx.ConnectError, httpx.TimeoutException) as error:
            raise TrackerError(f"MLflow at {url}: {error}") from None  # the policy's words or the OS's, not a server's
        except httpx.HTTPError as error:
            raise TrackerError(f"MLflow at {url}: {type(error).__name__}") from None
        if response.is_redirect:
            raise TrackerError(f"MLflow at {url} answered HTTP {response.status_code}, a redirect, not followed")
        if response.status_code == 404 and path.endswith("/get-by-name"):
            return None
        if not response.is_success:
            raise TrackerError(f"MLflow at {url} answered HTTP {response.status_code}")
        try:
            return response.json() if response.content else {}
        except ValueError:
            status = response.status_code
            raise TrackerError(f"MLflow at {url} answered HTTP {status} with a body that is not JSON") from None

    def _run(self) -> str:
        """The run, created at the first send that reaches the server (so a server down at the start is retried)."""
        if self.run_id is None:
            found = self._call("GET", f"{MLFLOW_API}/experiments/get-by-name", params={"experiment_name": self.project})
            experiment_id = _text(found, "experiment", "experiment_id") if found else None
            if experiment_id is None:
                created = self._call("POST", f"{MLFLOW_API}/experiments/create", body={"name": self.project})
                experiment_id = _text(created, "experiment_id")
            body = {"experiment_id": experiment_id, "run_name": self.run_name, "start_time": _millis()}
            info = self._call("POST", f"{MLFLOW_API}/runs/create", body=body)
            run_id = _text(info, "run", "info", "run_id")
            if experiment_id is None or run_id is None:
                raise TrackerError(f"MLflow at {self.uri} answered without an experiment or run id")
            artifact_uri = _text(info, "run", "info", "artifact_uri") or ""
            self.artifact_path = _proxied_path(artifact_uri)
            self.run_id = run_id
        return self.run_id

    def send(self, record: Record) -> None:
        run_id = self._run()
        now = _millis()
        step, batch = record.step, f"{MLFLOW_API}/runs/log-batch"
        metrics = [{"key": k, "value": float(v), "timestamp": now, "step": step} for k, v in record.metrics.items()]
        for start in range(0, len(metrics), 1000):
            self._call("POST", batch, body={"run_id": run_id, "metrics": metrics[start : start + 1000]})
        params = [{"key": k, "value": str(v)[:PARAM_CHARS]} for k, v in record.params.items()]
        for start in range(0, len(params), 100):
            self._call("POST", batch, body={"run_id": run_id, "params": params[start : start + 100]})
        refused = self._upload(_files(record))
        if record.finished is not None:
            status = MLFLOW_STATUS.get(record.finished, "FAILED")
            self._call("POST", f"{MLFLOW_API}/runs/update", body={"run_id": run_id, "status": status, "end_time": now})
        if refused:
            raise TrackerSkipped(refused)

    def _upload(self, files: dict[str, str]) -> str | None:
        """PUT each file to the artifact proxy; the first refusal's words when the server keeps artifacts elsewhere."""
        if not files:
            return None
        if self.artifact_path is None:
            if self.artifacts_refused:
                return None
            self.artifacts_refused = True
            return (
                f"MLflow at {self.uri} stores artifacts outside its artifact proxy; metrics and parameters are sent, "
                "files (config.json, texts, the best instruction) are not"
            )
        for name, text in files.items():
            path = "/".join(quote(part, safe="") for part in f"{self.artifact_path}/{name}".split("/"))
            url = f"{self.uri}{MLFLOW_ARTIFACTS_API}/{path}"
            try:
                response = self.http.put(url, content=text.encode("utf-8"))
            except httpx.HTTPError as error:
                raise TrackerError(f"MLflow at {url}: {type(error).__name__}") from None
            if not response.is_success:
                raise TrackerError(f"MLflow at {url} answered HTTP {response.status_code}")
        return None

    def close(self) -> None:
        self.http.close()


class TrackerSkipped(Exception):
    """The record was sent, but part of it could not be (said once); the sink warns and does not send it again."""


def _text(data: Any, *keys: str) -> str | None:
    """data[k1][k2]… as a string, or None where the reply lacks it (a foreign reply's shape is never trusted)."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return str(data) if isinstance(data, str | int) and not isinstance(data, bool) else None


def _proxied_path(artifact_uri: str) -> str | None:
    """The path under the artifact proxy of an `mlflow-artifacts:/…` artifact URI with no host of its own.

    >>> _proxied_path("mlflow-artifacts:/1/abc/artifacts")
    '1/abc/artifacts'
    >>> _proxied_path("s3://bucket/1/abc/artifacts") is None, _proxied_path("mlflow-artifacts://h:1/1/a") is None
    (True, True)
    """
    scheme, sep, rest = artifact_uri.partition(":")
    if scheme != "mlflow-artifacts" or not sep or rest.startswith("//") or ".." in rest.split("/"):
        return None
    return rest.strip("/") or None


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
        self.remote = bool(api_key)
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


def _mlflow(
    tracking: TrackingConfig, run_dir: Path, *, run_name: str, token: str | None, policy: NetPolicy | None
) -> Tracker:
    if tracking.mlflow_uri is None:
        return MlflowTracker(run_dir, project=tracking.project, run_name=run_name)
    if policy is None:
        host, port = parse_target(tracking.mlflow_uri)
        policy = NetPolicy(private_hosts=(f"[{host}]:{port}" if ":" in host else f"{host}:{port}",))
    return MlflowRestTracker(
        tracking.mlflow_uri, project=tracking.project, run_name=run_name, policy=policy, token=token
    )


def _error_text(error: Exception, *, remote: bool, name: str) -> str:
    """What a run's note says of a tracker's failure: our own errors whole; a library's error text only when the
    tracker talks to no server (its text may hold what a server wrote, or echo a header), else its type alone,
    with the whole of it in the worker's log."""
    if isinstance(error, TrackerError) or not remote:
        return f"{type(error).__name__}: {error}"
    log.warning("tracker %s failed: %s: %s", name, type(error).__name__, error)
    return f"{type(error).__name__} (the server's reply is not shown; the worker's log has the details)"


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
        policy: NetPolicy | None = None,
        trackers: dict[str, Callable[[], Tracker]] | None = None,
    ) -> None:
        """`policy`: what an MLflow server's URL must pass at every request (None: that host alone, whatever its
        address, as the command line's user named it); `trackers` replaces the built-in constructors by name (a
        test's failing tracker)."""
        tracking = config.tracking
        makers: dict[str, Callable[[], Tracker]] = {
            "tensorboard": lambda: TensorBoardTracker(run_dir / TENSORBOARD_DIR),
            "mlflow": lambda: _mlflow(tracking, run_dir, run_name=run_name, token=mlflow_token, policy=policy),
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
        except TrackerSkipped as skipped:  # the record went; a part of it never will (said once)
            slot.pending.pop(0)
            slot.failing = False
            self._warn(slot, str(skipped))
            if slot.pending:
                self._deliver(slot)
        except Exception as error:  # any failure of a tracker's library or server: the run must go on
            slot.failing = True
            self._warn(slot, _error_text(error, remote=slot.tracker is None or slot.tracker.remote, name=slot.name))

    def _warn(self, slot: _Slot, message: str) -> None:
        if self.warn is not None:
            self.warn.emit(TrackerFailed(step=self.translator.step, tracker=slot.name, error=message[:500]))

    def close(self) -> None:
        """Close every tracker that started (what is still pending is lost)."""
        for slot in self.slots:
            if slot.tracker is not None:
                with contextlib.suppress(Exception):  # closing a broken tracker must not fail the run either
                    slot.tracker.close()
                slot.tracker = None

    def trackers(self) -> Iterator[Tracker]:
        return (slot.tracker for slot in self.slots if slot.tracker is not None)
