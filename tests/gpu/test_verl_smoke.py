"""A short real verl run on a GPU node: two GRPO steps of a small instruct model with vLLM rollouts, the Search-R1
agent loop against the built-in corpus served over /retrieve, one evolution and a merged checkpoint.

Run it on a GPU node with the `gpu` extra installed and a local model directory:

    INSPO_VERL_SMOKE_MODEL=/models/Qwen2.5-0.5B-Instruct .venv/bin/python -m pytest tests/gpu -m gpu -s

It skips, saying why, without CUDA, without vLLM, or without INSPO_VERL_SMOKE_MODEL."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import threading
from pathlib import Path

import pytest

from inspo_engine.events import CheckpointSaved, RunFinished, StepCompleted, read_events
from inspo_engine.presets import preset

pytestmark = pytest.mark.gpu


def _why_not() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("verl") is None:
        return "the gpu extra (verl, vllm) is not installed: pip install -e .[gpu]"
    if not os.environ.get("INSPO_VERL_SMOKE_MODEL"):
        return "set INSPO_VERL_SMOKE_MODEL to a local Hugging Face model directory (e.g. Qwen2.5-0.5B-Instruct)"
    return None


def test_two_real_verl_steps_write_engine_events_and_a_merged_checkpoint(tmp_path: Path) -> None:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    import torch

    from inspo_engine.backends.verl.launcher import job_environment, prepare
    from inspo_engine.backends.verl.overrides import Cluster
    from inspo_engine.env.builtin import builtin_dataset
    from inspo_engine.env.retrievers import BM25Retriever
    from inspo_engine.env.server import make_retrieval_server

    server = make_retrieval_server(BM25Retriever(builtin_dataset().corpus), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    gpus = torch.cuda.device_count()
    config = preset("smoke").with_overrides(
        {
            "backend.name": "verl",
            "backend.model": os.environ["INSPO_VERL_SMOKE_MODEL"],
            "env.retriever": "remote",
            "env.retriever_url": f"http://{host!s}:{port}/retrieve",
            "total_steps": 2,
            "batch_size": 8 * gpus,
            "mini_batch_size": 8 * gpus,
            "micro_batch_size": 8 * gpus,
            "evolve_every": 1,
            "evolve_until": 1,
            "checkpoint.checkpoint_every": 2,
            "eval.eval_every": 2,
            "eval.eval_samples": 16,
        }
    )
    job = prepare(
        config,
        tmp_path / "run",
        cluster=Cluster(n_gpus_per_node=gpus, gpu_memory_utilization=0.4),
        extra=["actor_rollout_ref.rollout.agent.num_workers=2", "data.dataloader_num_workers=0"],
    )
    with (tmp_path / "verl.log").open("wb") as log:
        done = subprocess.run(job.argv, stdout=log, stderr=subprocess.STDOUT, env=job_environment(), timeout=3600)
    server.shutdown()
    assert done.returncode == 0, (tmp_path / "verl.log").read_text()[-4000:]
    events = read_events(job.events)
    assert [e.step for e in events if isinstance(e, StepCompleted)] == [1, 2]
    assert [e.status for e in events if isinstance(e, RunFinished)] == ["finished"]
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert saved and (Path(saved[-1].path) / "policy" / "config.json").is_file()
