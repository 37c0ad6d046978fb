"""Prepares and describes one verl job: its data files, its command line, its stop file, and the merge of verl's
FSDP shards into a Hugging Face directory; it trains nothing and never imports verl at module level.

A run directory looks like the torch backend's, plus verl's own:

    <out>/config.json                 the RunConfig
    <out>/events.jsonl                the engine's events, appended by the trainer (callers tail it)
    <out>/checkpoints/step-NNNNNN/    policy/ (merged Hugging Face model) + inspo_state.json (population, replay)
    <out>/verl/global_step_N/         verl's FSDP shards, optimizer and dataloader state (for resuming)
    <out>/data/{train,val}.parquet    the questions in verl's row format
    <out>/STOP                        created by a caller to stop the run after the current step

The job runs `python -m inspo_engine.verl_job <overrides>`; Ray joins the cluster named by RAY_ADDRESS
when it is set, and starts a local one otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...checkpoints import CHECKPOINTS_DIR, STATE_FILE, checkpoint_step, latest_checkpoint
from ...config import RunConfig
from ...environ import API_KEY_VARIABLE, CACHE_DIR_VARIABLE, api_key_from_env
from ...netpolicy import NetPolicy
from ...types import Question
from .overrides import AGENT_NAME, Cluster, RunPaths, quote, verl_overrides

EVENTS_FILE = "events.jsonl"
STOP_FILE = "STOP"
VERL_DIR = "verl"
MAIN_MODULE = "inspo_engine.verl_job"
"""The job's entry point (`python -m`): an entry point of the engine beside `build`, which it imports."""
OPTIMIZER_POLICY = "optimizer_policy"
"""The `inspo` key under which the job finds the network policy for its optimizer's base URL."""
RETRIEVER_POLICY = "retriever_policy"
"""The `inspo` key under which the agent loop finds the network policy for the retriever's URL."""


@dataclass(frozen=True)
class Job:
    """A prepared verl job: the command to run and the files a caller watches."""

    argv: list[str]
    out_dir: Path
    events: Path
    stop_file: Path


def rows(questions: Sequence[Question], data_source: str) -> list[dict[str, Any]]:
    """verl's dataset rows (Search-R1's layout): the question as the user message, the gold answers for the
    reward, the question again in `extra_info` for the replay buffer. The trainer adds the instruction."""
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": q.text}],
            "ability": "fact-reasoning",
            "agent_name": AGENT_NAME,
            "reward_model": {"style": "rule", "ground_truth": {"target": list(q.golden_answers)}},
            "extra_info": {
                "index": i,
                "question_id": q.id,
                "question": q.text,
                "golden_answers": list(q.golden_answers),
            },
        }
        for i, q in enumerate(questions)
    ]


def write_parquet(records: list[dict[str, Any]], path: Path) -> Path:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame.from_records(records).to_parquet(path)
    return path


def write_data(config: RunConfig, data_dir: Path) -> tuple[Path, Path]:
    """train.parquet from `env.dataset`, val.parquet with every benchmark (`data_source` = its name)."""
    from ...env.datasets import eval_questions, load_questions

    train = write_parquet(rows(load_questions(config.env.dataset, "train"), "train"), data_dir / "train.parquet")
    val: list[dict[str, Any]] = []
    for name in config.eval.benchmarks:
        val += rows(eval_questions(config.eval, name), name)
    return train, write_parquet(val, data_dir / "val.parquet")


def prepare(
    config: RunConfig,
    out_dir: Path,
    *,
    cluster: Cluster | None = None,
    resume_step: int | None = None,
    python: str = sys.executable,
    extra: Sequence[str] = (),
    optimizer_policy: NetPolicy | None = None,
    retriever_policy: NetPolicy | None = None,
) -> Job:
    """Write the run's config and data and return the job; `resume_step` continues from that engine checkpoint.
    `optimizer_policy` goes to the job, whose optimizer client checks every request against it, and
    `retriever_policy` to its agent loops, whose retriever client does the same (None: the URL is the operator's
    own)."""
    if config.env.retriever != "remote" or not config.env.retriever_url:
        raise ValueError(
            "the verl backend retrieves through a Search-R1 /retrieve server: set env.retriever='remote' and "
            "env.retriever_url (start one with `python -m inspo_engine serve-retriever`)"
        )
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(config.to_json(), encoding="utf-8")
    (out_dir / STOP_FILE).unlink(missing_ok=True)
    train, val = write_data(config, out_dir / "data")
    paths = RunPaths(
        train_files=str(train),
        val_files=str(val),
        verl_dir=str(out_dir / VERL_DIR),
        out_dir=str(out_dir),
        run_config=str(out_dir / "config.json"),
        retriever_url=config.env.retriever_url,
    )
    overrides = verl_overrides(config, cluster=cluster, paths=paths, experiment=out_dir.name)
    overrides += resume_overrides(out_dir, resume_step) if resume_step is not None else []
    overrides += policy_overrides(optimizer_policy, OPTIMIZER_POLICY) if optimizer_policy is not None else []
    overrides += policy_overrides(retriever_policy, RETRIEVER_POLICY) if retriever_policy is not None else []
    argv = [python, "-m", MAIN_MODULE, *overrides, *extra]
    return Job(argv=argv, out_dir=out_dir, events=out_dir / EVENTS_FILE, stop_file=out_dir / STOP_FILE)


def latest_step(out_dir: Path) -> int:
    """The step of the newest engine checkpoint under `out_dir`."""
    checkpoint = latest_checkpoint(out_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint with {STATE_FILE} under {out_dir / CHECKPOINTS_DIR} to resume from")
    return checkpoint_step(checkpoint)


def resume_overrides(out_dir: Path, step: int) -> list[str]:
    """Resume verl from its shards of `step`; the population comes from the engine checkpoint of that step."""
    path = f"{out_dir / VERL_DIR}/global_step_{step}"
    return ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={quote(path)}"]


def policy_overrides(policy: NetPolicy, key: str) -> list[str]:
    """The policy as `+inspo.<key>.*` overrides (quoted: no host can become an interpolation); the job reads them
    back with `job_policy`."""
    return [
        f"+inspo.{key}.allowed_hosts=[{','.join(quote(host) for host in policy.allowed_hosts)}]",
        f"+inspo.{key}.private_hosts=[{','.join(quote(host) for host in policy.private_hosts)}]",
    ]


def job_policy(inspo: Any, key: str) -> NetPolicy | None:
    """The network policy the caller gave the job under `key` of its `inspo` section (`policy_overrides`), or
    None: that URL is the operator's own and needs none."""
    if inspo.get(key) is None:
        return None
    section = inspo[key]
    return NetPolicy(
        allowed_hosts=tuple(str(host) for host in section.allowed_hosts),
        private_hosts=tuple(str(host) for host in section.private_hosts),
    )


def merge_fsdp_checkpoint(actor_dir: Path, target_dir: Path) -> None:
    """verl's model merger: the FSDP shards of `actor_dir` (plus its huggingface/ config and tokenizer) as one
    Hugging Face model directory in `target_dir`."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    target_dir.mkdir(parents=True, exist_ok=True)
    merger = FSDPModelMerger(
        ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            local_dir=str(actor_dir),
            target_dir=str(target_dir),
            hf_model_config_path=str(actor_dir / "huggingface"),
        )
    )
    merger.merge_and_save()
    merger.cleanup()


JOB_VARIABLES = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH",
    "PYTHONHASHSEED", "VIRTUAL_ENV", "LD_LIBRARY_PATH", CACHE_DIR_VARIABLE, "HF_HOME", "HF_HUB_CACHE",
    "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
    "VERL_USE_EXTERNAL_PLUGINS",
)  # fmt: skip
"""Variables a job inherits by name from its caller."""
JOB_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "RAY_", "VLLM_", "TORCH_", "PYTORCH_", "OMP_", "MKL_")
"""…and by prefix: the GPU stack, Ray (RAY_ADDRESS joins that cluster), vLLM and thread counts."""
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL")


def job_environment(
    base: dict[str, str] | None = None, *, api_key: str | None = None, extra: tuple[str, ...] = ()
) -> dict[str, str]:
    """The job's environment, minimal and explicit: from the caller's (`base`, default os.environ) only the
    variables named above and in `extra`, never one whose name says it holds a secret; plus the optimizer's
    `api_key` as INSPO_OPTIMIZER_API_KEY when given, and verl told to load this package's plugin (the agent loop)
    in every process. No database URL, Django secret or other API key reaches the job."""
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if (name in JOB_VARIABLES or name in extra or name.startswith(JOB_PREFIXES))
        and not any(word in name.upper() for word in _SECRET_WORDS)
    }
    env.setdefault("PATH", os.defpath)
    env.setdefault("VERL_USE_EXTERNAL_PLUGINS", "auto")
    env.setdefault("TOKENIZERS_PARALLELISM", "true")
    if api_key:
        env[API_KEY_VARIABLE] = api_key
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m inspo_engine.backends.verl.launcher --config run.json --out DIR`: prepare the run and exec verl."""
    parser = argparse.ArgumentParser(prog="python -m inspo_engine.backends.verl.launcher")
    parser.add_argument("--config", type=Path, required=True, help="a RunConfig JSON with backend.name = verl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--n-gpus-per-node", type=int, default=8)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    args, extra = parser.parse_known_args(argv)
    config = RunConfig.from_json(args.config.read_text(encoding="utf-8"))
    job = prepare(
        config,
        args.out,
        cluster=Cluster(n_gpus_per_node=args.n_gpus_per_node, nnodes=args.nnodes),
        resume_step=latest_step(args.out.resolve()) if args.resume else None,
        extra=extra,
    )
    if args.print:
        print(" ".join(job.argv))
        return 0
    env = job_environment(api_key=api_key_from_env(config.optimizer, os.environ))
    if config.tracking.backends:  # verl's own tracker adapters read the caller's W&B key and MLflow token
        env |= {name: os.environ[name] for name in ("WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN") if name in os.environ}
    os.execvpe(job.argv[0], job.argv, env)


if __name__ == "__main__":
    raise SystemExit(main())
