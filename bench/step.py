"""Where a GRPO step's time goes, and what INSPO adds on top of the static-instruction baseline, in one process.

Runs the same small config twice with the torch backend on SmolLM2-135M — once online (INSPO: sampling, pruning,
one evolution with verification) and once static (the Search-R1 baseline) — and prints a markdown table of the
mean seconds per step spent in rollout, reference log-probs, update and evolution, and the overhead of INSPO.

    .venv/bin/python bench/step.py [--steps 4] [--questions 4] [--group 4]

With `--paths`, it instead times the two GRPO phases that read whole trajectories — reference log-probs and the
update — on one set of real cpu-demo rollouts (questions × G, multi-turn with retrieved passages), along the full
path (logits and a log-softmax at every position, one row per rollout) and the shared-prefix path (each group's
prompt read once, the output head only where a token is trained), alternating the two `--repeats` times on fresh
copies of the same initial model, and prints the median seconds of each phase and the ratio full ÷ shared.

    .venv/bin/python bench/step.py --paths [--questions 4] [--group 4] [--repeats 3] [--threads 1]

With `--attention`, it times the reference pass and the update on the shared-prefix path with its attention computed
two ways, alternating on fresh copies of the same model: `dense`, one masked attention over each whole packed row
(prompt + G continuations, every query against every key), and `segments`, the prompt causally and each
continuation against the prompt and itself (`prefix.Segments`). `--repeat-responses K` repeats each rollout's
response K times, for the longer rows of later training steps.

    .venv/bin/python bench/step.py --attention [--questions 4] [--group 8] [--repeats 2] [--repeat-responses 3]
        [--precision fp32]

With `--precision fp32 bf16-mixed`, it runs the static baseline once at each `backend.precision` and prints the
phases side by side, with the rollout mismatch the bf16-mixed run logged (`--device cuda` runs on the GPU).

    .venv/bin/python bench/step.py --precision fp32 bf16-mixed [--steps 2] [--questions 4] [--group 4]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from inspo_engine.backends.torch import prefix
from inspo_engine.backends.torch.backend import TorchBackend
from inspo_engine.backends.torch.grpo import GRPOTrainer, TrainPath
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.build import build_run, load_inputs, make_retriever
from inspo_engine.config import RunConfig
from inspo_engine.events import EvolutionCompleted, InstructionProposed, ListSink, StepCompleted
from inspo_engine.presets import preset
from inspo_engine.types import RolloutRequest

ROOT = Path(__file__).resolve().parents[1]


def config_for(mode: str, args: argparse.Namespace, precision: str = "fp32") -> RunConfig:
    steps = args.steps
    return preset("cpu-demo").with_overrides(
        {
            "backend.precision": precision,
            "backend.device": args.device,
            "mode": mode,
            "total_steps": steps,
            "grpo.batch_size": args.questions,
            "grpo.mini_batch_size": args.questions,
            "grpo.micro_batch_size": args.questions,
            "group_size": args.group,
            "prune_every": max(1, steps // 2),
            "evolve_every": max(1, steps // 2),
            "evolve_until": max(1, steps // 2),
            "checkpoint.checkpoint_every": 0,
            "eval.benchmarks": [],
        }
    )


def run(mode: str, args: argparse.Namespace, precision: str = "fp32") -> dict[str, float]:
    sink = ListSink()
    with tempfile.TemporaryDirectory() as out:
        config = config_for(mode, args, precision)
        loop = build_run(config, out_dir=Path(out), cache_dir=ROOT / "cache", sink=sink)
        started = time.perf_counter()
        loop.run()
        wall = time.perf_counter() - started
    steps = sink.of(StepCompleted)
    evolution = 0.0
    for done in sink.of(EvolutionCompleted):
        first = min(e.time for e in sink.of(InstructionProposed) if e.step == done.step)
        evolution += done.time - first
    row = {key: statistics.fmean(s.timings.get(key, 0.0) for s in steps) for key in PARTS}
    row["evolution"] = evolution / len(steps)
    row["wall"] = wall / len(steps)
    row["verification_ratio"] = steps[-1].overhead.verification_ratio
    for key in MISMATCH:
        row[key] = statistics.fmean(s.metrics.get(key, 0.0) for s in steps)
    return row


MISMATCH = ("rollout_logp_abs_diff", "rollout_kl", "rollout_ratio_outside_clip")


def compare_precisions(args: argparse.Namespace) -> None:
    rows = {precision: run("static", args, precision) for precision in args.precision}
    print(f"{args.steps} steps, {args.questions} questions × G={args.group}, SmolLM2-135M on {args.device}, static\n")
    print("| seconds per step | " + " | ".join(rows) + " |\n|---|" + "---:|" * len(rows))
    for key in (*PARTS, "wall"):
        print(f"| {key} | " + " | ".join(f"{row[key]:.2f}" for row in rows.values()) + " |")
    for key in MISMATCH:
        print(f"| {key} (mean) | " + " | ".join(f"{row[key]:.4g}" for row in rows.values()) + " |")


PARTS = ("rollout", "old_logprobs", "ref_logprobs", "update")
PATHS: tuple[TrainPath, TrainPath] = ("full", "shared_prefix")


def rollout_samples(config: RunConfig, args: argparse.Namespace) -> tuple[TorchBackend, list[TrainSample]]:
    """Real rollouts of the first training questions with the seed instruction, as training samples with
    alternating ±1 advantages (the untrained model rarely earns a reward; the work of a step does not depend on it)."""
    inputs = load_inputs(config)
    retriever = make_retriever(config, ROOT / "cache")
    backend = TorchBackend(config, retriever=retriever, cache_dir=ROOT / "cache" / "models")
    seed = config.population.seed_instruction
    requests = [RolloutRequest("seed", seed, question) for question in inputs.train[: args.questions]]
    trajectories = [t for group in backend.rollout(requests, args.group) for t in group]
    samples = [
        TrainSample(t.payload.prompt_ids, t.payload.response_ids, t.payload.response_mask, (-1.0) ** i)
        for i, t in enumerate(trajectories)
        if t.payload is not None and t.payload.response_ids
    ]
    return backend, samples


def compare_paths(args: argparse.Namespace) -> None:
    config = config_for("static", args)
    backend, samples = rollout_samples(config, args)
    initial = backend.trainer.policy
    timings: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    for _ in range(args.repeats):
        for path in PATHS:
            policy = copy.deepcopy(initial)
            trainer = GRPOTrainer(policy, backend.tokenizer, config.grpo, device=backend.device, path=path)
            timings[path].append(trainer.update(samples).timings)
            del trainer, policy
    prompt = sum(len(s.prompt_ids) for s in samples)
    response = sum(len(s.response_ids) for s in samples)
    trained = sum(sum(s.response_mask) for s in samples)
    print(
        f"{len(samples)} rollouts ({args.questions} questions × G={args.group}), {prompt} prompt + {response} response "
        f"tokens ({trained} trained), SmolLM2-135M on CPU, {torch.get_num_threads()} thread(s), "
        f"median of {args.repeats} alternating runs\n"
    )
    print("| seconds per step | full path | shared prefix + selective logits | full ÷ shared |\n|---|---:|---:|---:|")
    for key in ("ref_logprobs", "update", "both"):
        full, shared = (statistics.median(_phase(t, key) for t in timings[path]) for path in PATHS)
        print(f"| {key} | {full:.2f} | {shared:.2f} | {full / shared:.2f}× |")


def compare_attention(args: argparse.Namespace) -> None:
    precision = (args.precision or ["fp32"])[0]
    config = config_for("static", args, precision)
    backend, samples = rollout_samples(config, args)
    k = args.repeat_responses
    samples = [TrainSample(s.prompt_ids, s.response_ids * k, s.response_mask * k, s.advantage) for s in samples]
    initial, compute = backend.trainer.policy, backend.trainer.compute_dtype
    keep = prefix.Layout.model_inputs

    def dense(layout: prefix.Layout) -> dict[str, Any]:
        inputs = keep(layout)
        inputs.pop("segments", None)
        return inputs

    timings: dict[str, list[dict[str, float]]] = {"dense": [], "segments": []}
    for _ in range(args.repeats):
        for name in timings:
            prefix.Layout.model_inputs = dense if name == "dense" else keep  # type: ignore[method-assign]
            policy = copy.deepcopy(initial)
            trainer = GRPOTrainer(policy, backend.tokenizer, config.grpo, device=backend.device, compute_dtype=compute)
            timings[name].append(trainer.update(samples).timings)
            del trainer, policy
    prefix.Layout.model_inputs = keep  # type: ignore[method-assign]
    response = sum(len(s.response_ids) for s in samples)
    print(
        f"{len(samples)} rollouts ({args.questions} questions × G={args.group}, responses repeated {k}×), "
        f"{response} response tokens, SmolLM2-135M on CPU in {precision}, {torch.get_num_threads()} thread(s), "
        f"median of {args.repeats} alternating runs\n"
    )
    print("| seconds per step | dense masked rows | segments | segments ÷ dense |\n|---|---:|---:|---:|")
    for key in ("ref_logprobs", "update"):
        dense_s, segments_s = (statistics.median(t[key] for t in timings[name]) for name in timings)
        print(f"| {key} | {dense_s:.2f} | {segments_s:.2f} | {segments_s / dense_s:.2f}× |")


def _phase(timings: dict[str, float], key: str) -> float:
    return timings["ref_logprobs"] + timings["update"] if key == "both" else timings[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--paths", action="store_true", help="compare the full and shared-prefix GRPO paths")
    parser.add_argument("--repeats", type=int, default=3, help="with --paths: alternating runs of each path")
    parser.add_argument("--attention", action="store_true", help="dense masked rows against segments, shared path")
    parser.add_argument("--repeat-responses", type=int, default=1, help="with --attention: each response K times")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--precision", nargs="+", choices=["fp32", "bf16-mixed"], help="static runs at each, one table")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.attention:
        compare_attention(args)
        return
    if args.precision:
        compare_precisions(args)
        return
    if args.paths:
        compare_paths(args)
        return
    online, static = run("online", args), run("static", args)
    print(f"{args.steps} steps, {args.questions} questions × G={args.group}, SmolLM2-135M on CPU\n")
    print("| seconds per step | INSPO (online) | static baseline |\n|---|---:|---:|")
    for key in (*PARTS, "evolution", "wall"):
        print(f"| {key} | {online[key]:.2f} | {static[key]:.2f} |")
    overhead = online["wall"] / static["wall"] - 1
    print(f"\nverification rollouts / training rollouts: {online['verification_ratio']:.1%}")
    print(f"inspo_overhead_vs_static={overhead:.1%}")


if __name__ == "__main__":
    main()
