"""Full fine-tuning against LoRA (rank 16 and 64, every projection) on the cpu-demo's shapes: SmolLM2-135M, its
reward, openings and turn lengths, one step of `--questions` questions × `--group` replies.

In one process, for each precision (fp32 and bf16-mixed), the three policies start from the same weights (LoRA's
adapters start at zero, so all three decode alike) and take `--rounds` interleaved steps on the same batch: each
round every policy rolls out the same requests from the same generator state, then updates on the same training
samples (the full policy's first rollouts, advantages ±1). Update = the backward passes and the optimizer step; step
= rollout + reference and old log-probs + update. Peak resident memory needs a process of its own: each setting's
one step again in a fresh process (`--rss-of`). Prints a markdown table, then the summary line of rank 16 in
bf16-mixed, the cpu-demo's precision on a machine that computes in bfloat16 (fp32 elsewhere: `auto`).

    .venv/bin/python bench/lora.py [--quick] [--rounds 2] [--threads 2]

`--quick` takes 2 questions × 4 replies instead of the cpu-demo's 4 × 8 (same model, turns and lengths).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inspo_engine.backends.torch.backend import TorchBackend  # noqa: E402
from inspo_engine.backends.torch.precision import native_bfloat16  # noqa: E402
from inspo_engine.backends.torch.samples import TrainSample  # noqa: E402
from inspo_engine.build import load_inputs, make_retriever  # noqa: E402
from inspo_engine.checkpoints import directory_bytes  # noqa: E402
from inspo_engine.config import RunConfig  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402
from inspo_engine.types import RolloutRequest  # noqa: E402

VARIANTS = {"full": None, "lora16": 16, "lora64": 64}
PRECISIONS = ("fp32", "bf16-mixed")


def config_for(variant: str, precision: str, args: argparse.Namespace) -> RunConfig:
    rank = VARIANTS[variant]
    lora = {"grpo.use_lora": True, "grpo.lora_rank": rank} if rank else {}
    return preset("cpu-demo").with_overrides(
        {
            "backend.precision": precision,
            "grpo.group_size": args.group,
            "grpo.batch_size": args.questions,
            "grpo.mini_batch_size": args.questions,
            "grpo.micro_batch_size": args.questions,
            **lora,
        }
    )


def build(variant: str, precision: str, args: argparse.Namespace) -> tuple[TorchBackend, list[RolloutRequest]]:
    config = config_for(variant, precision, args)
    inputs = load_inputs(config)
    retriever = make_retriever(config, ROOT / "cache")
    backend = TorchBackend(config, retriever=retriever, cache_dir=ROOT / "cache" / "models")
    seed = config.population.seed_instruction
    return backend, [RolloutRequest("seed", seed, q) for q in inputs.train[: args.questions]]


def samples_of(groups: list[list[Any]]) -> list[TrainSample]:
    trajectories = [t for group in groups for t in group]
    return [
        TrainSample(t.payload.prompt_ids, t.payload.response_ids, t.payload.response_mask, (-1.0) ** i)
        for i, t in enumerate(trajectories)
        if t.payload is not None and t.payload.response_ids
    ]


def one_step(backend: TorchBackend, requests: list[RolloutRequest], group: int, samples: list[TrainSample] | None):
    """(rollout s, update s, step s, the samples trained on): the rollout from a fixed generator state, then the
    update on `samples` (this rollout's own when None)."""
    backend.generator.manual_seed(0)
    groups, rollout_s = timed(lambda: backend.rollout(requests, group))
    samples = samples if samples is not None else samples_of(groups)
    result = backend.trainer.update(samples)
    update_s = result.timings["update"]
    return rollout_s, update_s, rollout_s + sum(result.timings.values()), samples


def timed(work: Any) -> tuple[Any, float]:
    import time

    started = time.perf_counter()
    out = work()
    return out, time.perf_counter() - started


def measure(precision: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    backends = {variant: build(variant, precision, args) for variant in VARIANTS}
    samples = None
    times: dict[str, dict[str, list[float]]] = {v: {"rollout": [], "update": [], "step": []} for v in VARIANTS}
    for _ in range(args.rounds):
        for variant, (backend, requests) in backends.items():
            rollout_s, update_s, step_s, used = one_step(backend, requests, args.group, samples)
            samples = used
            for key, value in (("rollout", rollout_s), ("update", update_s), ("step", step_s)):
                times[variant][key].append(value)
    computes_in = {variant: backend.computes_in for variant, (backend, _) in backends.items()}
    sizes = {variant: checkpoint_gb(backend) for variant, (backend, _) in backends.items()}
    del backends
    return {
        v: {
            **{k: statistics.median(values) for k, values in phases.items()},
            "computes_in": computes_in[v],
            "checkpoint_gb": sizes[v],
        }
        for v, phases in times.items()
    }


def checkpoint_gb(backend: TorchBackend) -> float:
    """What the backend's checkpoint (policy and optimizer state) takes on disk, in GB."""
    with tempfile.TemporaryDirectory() as directory:
        backend.save(Path(directory))
        return directory_bytes(Path(directory)) / 1e9


def peak_rss_gb(variant: str, precision: str, args: argparse.Namespace) -> float:
    """One step of `variant` in a fresh process: its peak resident set, in GB (10⁹ bytes)."""
    command = [sys.executable, __file__, "--rss-of", variant, "--precision", precision]
    command += ["--questions", str(args.questions), "--group", str(args.group), "--threads", str(args.threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["peak_rss_gb"])


def rss_child(args: argparse.Namespace) -> None:
    backend, requests = build(args.rss_of, args.precision, args)
    one_step(backend, requests, args.group, None)
    print(json.dumps({"peak_rss_gb": high_water_kib() * 1024 / 1e9}))


def high_water_kib() -> int:
    """This process's peak resident set (VmHWM). Not `ru_maxrss`: Linux carries a parent's resident set at the fork
    into its child's `ru_maxrss` across exec, so every child would report at least this benchmark's own size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 questions × 4 replies instead of 4 × 8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--group", type=int, default=None)
    parser.add_argument("--rss-of", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16-mixed", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.questions = args.questions or (2 if args.quick else 4)
    args.group = args.group or (4 if args.quick else 8)
    torch.set_num_threads(args.threads)
    if args.rss_of:
        rss_child(args)
        return
    print(
        f"cpu-demo shapes, {args.questions} questions × {args.group} replies, {args.rounds} rounds (medians), "
        f"{args.threads} threads; this CPU computes in bfloat16 natively: {native_bfloat16(torch.device('cpu'))}"
    )
    print()
    print(
        "| precision | policy | rollout s | update s | step s | peak RSS GB | checkpoint GB | update × | rollout ratio "
        "| step × |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary: dict[str, dict[str, float]] = {}
    for precision in PRECISIONS:
        medians = measure(precision, args)
        full = medians["full"]
        for variant, m in medians.items():
            rss = peak_rss_gb(variant, precision, args)
            row = {
                "update_speedup": full["update"] / m["update"],
                "rollout_ratio": m["rollout"] / full["rollout"],
                "step_speedup": full["step"] / m["step"],
                "peak_rss_gb": rss,
            }
            summary[f"{precision}/{variant}"] = row
            print(
                f"| {precision} ({m['computes_in']}) | {variant} | {m['rollout']:.2f} | {m['update']:.2f} | "
                f"{m['step']:.2f} | {rss:.2f} | {m['checkpoint_gb']:.3f} | {row['update_speedup']:.2f} | "
                f"{row['rollout_ratio']:.2f} | "
                f"{row['step_speedup']:.2f} |"
            )
    last = summary["bf16-mixed/lora16"]
    print()
    print("rank16: " + " ".join(f"{key}={value:.2f}" for key, value in last.items()))


if __name__ == "__main__":
    main()
