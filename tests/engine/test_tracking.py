"""Experiment trackers: a run's events written by the real MLflow, W&B and TensorBoard libraries into the run
directory, read back with each one's own reader (MlflowClient on the file store, W&B's record protobuf over its
offline run file, TensorBoard's EventAccumulator); a tracker that fails never fails the run and catches up at the
next step; the config's checks."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from inspo_engine import tracking
from inspo_engine.config import RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.events import (
    CandidateInfo,
    EvalCompleted,
    InstructionAdded,
    InstructionInfo,
    InstructionProposed,
    InstructionPruned,
    InstructionVerified,
    ListSink,
    MemberStats,
    Overhead,
    PopulationChanged,
    PopulationCollapsed,
    RunFinished,
    RunStarted,
    StepCompleted,
    TrackerFailed,
)
from inspo_engine.netpolicy import NetPolicy
from inspo_engine.tracking import TrackingSink, package_errors

SEED = "Answer the question; search when unsure."
CHILD = "Search first, then answer in <answer> tags."


def _config(*backends: str, **tracking_fields: object) -> RunConfig:
    return RunConfig.from_dict({"tracking": {"backends": list(backends), **tracking_fields}})


def _step(step: int, reward: float) -> StepCompleted:
    return StepCompleted(
        step=step,
        total_steps=2,
        phase="train",
        reward_mean=reward,
        reward_std=0.1,
        tool_calls_mean=1.5,
        response_length_mean=40.0,
        instruction_length_mean=12.0,
        metrics={"pg_loss": -0.25 * step, "kl": 0.01},
        timings={"rollout": 2.0},
        overhead=Overhead(optimizer_calls=step, training_rollouts=8 * step),
    )


def _events(config: RunConfig) -> list:
    """A two-step run: the seed, an evolution that adds one child and rejects one candidate, a prune, a collapse
    alarm, an evaluation, the end."""
    candidates = [CandidateInfo(CHILD, True, score=0.6, accepted=True, instruction_id="i1"), CandidateInfo("x", True)]
    return [
        RunStarted(config=config.to_dict(), backend="torch"),
        InstructionAdded(step=0, instruction=InstructionInfo("i0", SEED, "seed", None, 0)),
        PopulationChanged(step=0, reason="init", members=[MemberStats("i0", 0.0, 1.0, 0, None)], best_id="i0"),
        _step(1, 0.25),
        InstructionProposed(
            step=1, round_id="r1", round=1, proposer="reflection", parent_id="i0", critique="too vague",
            failures=[], candidates=candidates, optimizer_model="rules", input_tokens=10, output_tokens=5,
        ),
        InstructionVerified(step=1, round_id="r1", parent_id="i0", parent_score=0.5, n_questions=4,
                            candidates=candidates),
        InstructionAdded(step=1, instruction=InstructionInfo("i1", CHILD, "evolved", "i0", 1)),
        PopulationChanged(
            step=1, reason="evolved",
            members=[MemberStats("i0", 0.25, 0.3, 8, 0.25), MemberStats("i1", 0.5, 0.7, 0, None)], best_id="i1",
        ),
        _step(2, 0.75),
        InstructionPruned(step=2, instruction_id="i0", weight=0.25, reason="halving"),
        PopulationChanged(step=2, reason="pruned", members=[MemberStats("i1", 0.6, 1.0, 8, 0.6)], best_id="i1"),
        PopulationCollapsed(step=2, since_step=1, steps=2, reasons=["entropy"], cosine_min=None,
                            entropy_normalised=0.0, collapse_cosine=0.95, collapse_entropy=0.05),
        EvalCompleted(step=2, benchmark="builtin", metric="em", value=0.4, n=10, instruction_id="i1", f1=0.5),
        RunFinished(step=2, status="finished", best_instruction_id="i1", best_instruction=CHILD,
                    overhead=Overhead()),
    ]  # fmt: skip


def _run(config: RunConfig, run_dir: Path, **kwargs: object) -> ListSink:
    warnings = ListSink()
    sink = TrackingSink(config, run_dir, run_name="run-1", warn=warnings, **kwargs)  # type: ignore[arg-type]
    for event in _events(config):
        sink.emit(event)
    sink.close()
    return warnings


# -- TensorBoard -------------------------------------------------------------------------------------------------


def _scalars(directory: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[str]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    scalars = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    texts = {  # add_text stores a text under '<tag>/text_summary'
        tag.removesuffix("/text_summary"): [e.tensor_proto.string_val[0].decode() for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
    }
    return scalars, texts


@pytest.mark.torch  # tensorboard's writer imports torch
def test_tensorboard_event_files_in_the_run_directory_hold_every_kind_of_event(tmp_path):
    config = _config("tensorboard")
    assert _run(config, tmp_path).events == []
    scalars, texts = _scalars(tmp_path / "tensorboard")
    assert scalars["reward_mean"] == [(1, 0.25), (2, 0.75)]
    assert scalars["train/pg_loss"] == [(1, -0.25), (2, -0.5)]
    assert scalars["instruction/i0/weight"] == [(0, 0.0), (1, 0.25)]
    assert scalars["instruction/i1/share"] == [(1, pytest.approx(0.7)), (2, 1.0)]
    assert scalars["evolution/proposed"] == [(1, 2.0)] and scalars["evolution/rejected"] == [(1, 1.0)]
    assert scalars["evolution/verified"] == [(1, 1.0)] and scalars["evolution/pruned"] == [(2, 1.0)]
    assert scalars["eval/builtin/em"] == [(2, pytest.approx(0.4))] and scalars["alarm/collapsed"] == [(2, 1.0)]
    assert texts["best_instruction.txt"] == [CHILD + "\n"]
    population = json.loads(texts["population.json"][0])
    assert [(i["id"], i["text"], i["share"]) for i in population["instructions"]] == [("i1", CHILD, 1.0)]
    assert json.loads(texts["config.json"][0])["tracking"]["backends"] == ["tensorboard"]


# -- MLflow ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_file_store_in_the_run_directory_reads_back_with_mlflow_client(tmp_path):
    from mlflow.tracking import MlflowClient

    config = _config("mlflow", project="search-agents")
    assert _run(config, tmp_path).events == []
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("search-agents")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "run-1" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "reward_mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.75)]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "instruction/i1/weight")] == [0.5, 0.6]
    assert run.data.params["grpo.loss"] == "grpo" and run.data.params["tracking.project"] == "search-agents"
    assert run.data.params["population.seed_instruction"] == config.population.seed_instruction[:500]
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"best_instruction.txt", "population.json", "config.json"} <= files
    best = Path(client.download_artifacts(run.info.run_id, "best_instruction.txt", str(tmp_path / "out")))
    assert best.read_text() == CHILD + "\n"


# -- W&B ---------------------------------------------------------------------------------------------------------


def _wandb_records(path: Path) -> list:
    """The records of a W&B run file: its LevelDB-log framing (7-byte ':W&B' header, 32 KiB blocks, each chunk
    with a CRC, length and type) around W&B's own `Record` protobuf."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, chunks, pending = 32768, 7, [], b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:
            position += left
            continue
        chunk, position = data[position + 7 : position + 7 + length], position + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind in (2, 3):
            pending += chunk
        else:
            chunks.append(pending + chunk)
            pending = b""
    records = []
    for raw in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


@pytest.mark.slow
def test_wandb_without_a_key_runs_offline_in_the_run_directory(tmp_path):
    config = _config("wandb", project="search-agents")
    assert _run(config, tmp_path).events == []
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = _wandb_records(run_file)
    for _ in range(100):  # W&B's service may still be writing the file when finish() returns
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        time.sleep(0.1)
        records = _wandb_records(run_file)
    history = [
        {item.nested_key[0]: json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    rewards = [(h["_step"], h["reward_mean"]) for h in history if "reward_mean" in h]
    assert rewards == [(1, 0.25), (2, 0.75)]
    assert any(h.get("eval/builtin/em") == 0.4 for h in history)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "search-agents" and run.display_name == "run-1"
    files = {m.path for r in records if r.WhichOneof("record_type") == "artifact" for m in r.artifact.manifest.contents}
    assert {"best_instruction.txt", "population.json", "config.json"} <= files


# -- failures ----------------------------------------------------------------------------------------------------


@pytest.mark.torch  # tensorboard's writer imports torch
def test_a_failing_tracker_warns_never_fails_the_run_and_catches_up_at_the_next_step(tmp_path):
    """TensorBoard cannot create its directory (a file stands there) until the file goes away after step 1: each
    step while it fails brings one warning, and once it can write, everything it missed arrives."""
    blocker = tmp_path / "tensorboard"
    blocker.write_text("not a directory")
    config = _config("tensorboard")
    warnings = ListSink()
    sink = TrackingSink(config, tmp_path, run_name="run-1", warn=warnings)
    events = _events(config)
    first_step = next(i for i, e in enumerate(events) if isinstance(e, StepCompleted))
    for event in events[: first_step + 1]:
        sink.emit(event)
    failed = warnings.of(TrackerFailed)
    assert [(w.tracker, w.step) for w in failed] == [("tensorboard", 0), ("tensorboard", 1)]
    assert "FileExistsError" in failed[0].error or "NotADirectoryError" in failed[0].error
    blocker.unlink()
    for event in events[first_step + 1 :]:
        sink.emit(event)
    sink.close()
    assert len(warnings.of(TrackerFailed)) == 2
    scalars, texts = _scalars(tmp_path / "tensorboard")
    assert scalars["reward_mean"] == [(1, 0.25), (2, 0.75)] and "config.json" in texts


def test_a_tracker_whose_package_is_missing_is_named(monkeypatch):
    assert package_errors(_config("mlflow", "wandb", "tensorboard").tracking) == []
    monkeypatch.setitem(tracking.PACKAGES, "wandb", ("no_such_module_for_inspo", "wandb"))
    (error,) = package_errors(_config("wandb", "tensorboard").tracking)
    assert error.field == "tracking.backends" and "wandb" in error.message


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"backends": ["neptune"]}, "tracking.backends"),
        ({"backends": ["mlflow", "mlflow"]}, "tracking.backends"),
        ({"project": "../etc"}, "tracking.project"),
        ({"mlflow_uri": "file:///etc/passwd"}, "tracking.mlflow_uri"),
        ({"wandb_secret": "a b"}, "tracking.wandb_secret"),
    ],
)
def test_the_config_refuses_bad_tracking_fields_by_name(fields, field):
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"tracking": fields})
    assert [e.field for e in error.value.errors] == [field]


def test_no_tracker_is_the_default_and_writes_nothing(tmp_path):
    config = RunConfig()
    assert config.tracking.backends == []
    _run(config, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_mlflow_server_that_is_down_warns_at_each_step_and_the_run_goes_on(tmp_path):
    """A real MLflow client against a port nobody listens on: each step's retry fails within seconds."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens there
    config = _config("mlflow", mlflow_uri=f"http://127.0.0.1:{port}")
    started = time.monotonic()
    warnings = _run(config, tmp_path)
    failed = warnings.of(TrackerFailed)
    assert [w.step for w in failed] == [0, 1, 2, 2]  # the first event, each step, the end
    assert all(w.tracker == "mlflow" for w in failed) and time.monotonic() - started < 120


class _MlflowServer:
    """MLflow's REST API as its server speaks it (`/api/2.0/mlflow/…` JSON, `mlflow-artifacts` uploads), recording
    each request's path and Authorization header; mlflow-skinny has no server of its own to run here."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.requests.append((self.command, self.path, self.headers.get("Authorization")))
                status, body = server.reply(self.path)
                payload = json.dumps(body).encode()
                self.send_response(status)
                if getattr(server, "location", ""):
                    self.send_header("Location", server.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = _answer

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @staticmethod
    def reply(path: str) -> tuple[int, dict]:
        run = {
            "info": {
                "run_id": "r1", "run_uuid": "r1", "experiment_id": "1", "run_name": "run-1", "status": "RUNNING",
                "start_time": 0, "artifact_uri": "mlflow-artifacts:/1/r1/artifacts", "lifecycle_stage": "active",
            },
            "data": {},
        }  # fmt: skip
        if "experiments/get-by-name" in path:
            return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no experiment"}
        if "experiments/create" in path:
            return 200, {"experiment_id": "1"}
        if "runs/create" in path or "runs/get" in path:
            return 200, {"run": run}
        return 200, {}

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.mark.slow
def test_an_mlflow_token_reaches_the_server_on_every_request_and_leaves_no_trace_in_the_environment(tmp_path):
    import os

    server = _MlflowServer()
    try:
        warnings = _run(_config("mlflow", mlflow_uri=server.uri), tmp_path, mlflow_token="s3cret")
    finally:
        server.close()
    assert warnings.of(TrackerFailed) == []
    paths = [path for _, path, _ in server.requests]
    assert any("runs/log-batch" in p for p in paths) and any("mlflow-artifacts" in p for p in paths)
    assert {auth for _, _, auth in server.requests} == {"Bearer s3cret"}
    assert "MLFLOW_TRACKING_TOKEN" not in os.environ


def test_an_mlflow_secret_needs_the_server_it_goes_to():
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"tracking": {"mlflow_secret": "token"}})
    assert [e.field for e in error.value.errors] == ["tracking.mlflow_secret"]
    assert RunConfig.from_dict({"tracking": {"mlflow_secret": "token", "mlflow_uri": "https://m.example"}})


class _Scripted(_MlflowServer):
    """An MLflow server that answers every request with `status`, a `Location` and a body of its choosing."""

    def __init__(self, status: int, *, location: str = "", body: dict | None = None) -> None:
        self.status, self.location, self.body = status, location, body or {}
        super().__init__()

    def reply(self, path: str) -> tuple[int, dict]:  # type: ignore[override]
        return self.status, self.body


def _only(server: _MlflowServer) -> NetPolicy:
    """The platform's policy with the one server allowed (a private address, so named in private_hosts)."""
    return NetPolicy(private_hosts=(server.uri.removeprefix("http://"),))


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("policy", ["platform", "command line"])
@pytest.mark.slow
def test_an_mlflow_server_that_redirects_gets_no_request_followed_to_where_it_points(tmp_path, status, policy):
    internal = _MlflowServer()  # an internal service on a port nobody allowed
    allowed = _Scripted(status)
    allowed.location = f"{internal.uri}/api/2.0/mlflow/experiments/get-by-name"
    try:
        config = _config("mlflow", mlflow_uri=allowed.uri)
        chosen = _only(allowed) if policy == "platform" else None
        warnings = _run(config, tmp_path, mlflow_token="s3cret", policy=chosen)
    finally:
        allowed.close()
        internal.close()
    assert internal.requests == []
    assert allowed.requests  # the allowed server was asked, and only it
    failed = warnings.of(TrackerFailed)
    assert failed and all(f"HTTP {status}, a redirect, not followed" in w.error for w in failed)
    assert all(allowed.uri in w.error and internal.uri not in w.error for w in failed)


@pytest.mark.slow
def test_a_tracker_error_names_the_url_and_status_never_what_the_server_wrote(tmp_path):
    """A server that answers 500 with an internal body and the Authorization header it was sent."""
    body = {"message": "INTERNAL-BODY db password=hunter2", "echo": "Authorization: Bearer s3cret-token"}
    server = _Scripted(500, body=body)
    try:
        warnings = _run(_config("mlflow", mlflow_uri=server.uri), tmp_path, mlflow_token="s3cret-token")
    finally:
        server.close()
    failed = warnings.of(TrackerFailed)
    assert failed
    for warning in failed:
        assert "HTTP 500" in warning.error and server.uri in warning.error
        assert "INTERNAL-BODY" not in warning.error and "hunter2" not in warning.error
        assert "s3cret-token" not in warning.error


@pytest.mark.slow
def test_a_request_the_policy_refuses_is_never_sent_and_says_why_in_our_words(tmp_path):
    server = _MlflowServer()
    try:
        warnings = _run(_config("mlflow", mlflow_uri=server.uri), tmp_path, policy=NetPolicy())
    finally:
        server.close()
    assert server.requests == []
    failed = warnings.of(TrackerFailed)
    assert failed and "refused by the network policy" in failed[0].error and "allow-list" in failed[0].error


@pytest.mark.slow
def test_a_server_that_keeps_artifacts_elsewhere_gets_metrics_and_one_warning(tmp_path):
    class Elsewhere(_MlflowServer):
        @staticmethod
        def reply(path: str) -> tuple[int, dict]:
            status, body = _MlflowServer.reply(path)
            if "runs/create" in path:
                body["run"]["info"]["artifact_uri"] = "s3://bucket/1/r1/artifacts"
            return status, body

    server = Elsewhere()
    try:
        warnings = _run(_config("mlflow", mlflow_uri=server.uri), tmp_path)
    finally:
        server.close()
    paths = [path for _, path, _ in server.requests]
    assert any("runs/log-batch" in p for p in paths) and not any("mlflow-artifacts" in p for p in paths)
    assert any("runs/update" in p for p in paths)  # the run was closed
    failed = warnings.of(TrackerFailed)
    assert len(failed) == 1 and "stores artifacts outside its artifact proxy" in failed[0].error
