"""Where a GRPO step's time goes, and what INSPO adds on top of the static-instruction baseline, in one process.

Runs the same small config twice with the torch backend on SmolLM2-135M — once online (INSPO: sampling, pruning,
one evolution with verification) and once static (the Search-R1 baseline) — and prints a markdown table of the
mean seconds per step spent in rollout, reference log-probs, update and evolution, and the overhead of INSPO.

    .venv/bin/python bench/step.py [--steps 4] [--questions 4] [--group 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from inspo_engine.build import build_run
from inspo_engine.config import RunConfig, preset
from inspo_engine.events import EvolutionCompleted, InstructionProposed, ListSink, StepCompleted

ROOT = Path(__file__).resolve().parents[1]


def config_for(mode: str, args: argparse.Namespace) -> RunConfig:
    steps = args.steps
    return preset("cpu-demo").with_overrides(
        {
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


def run(mode: str, args: argparse.Namespace) -> dict[str, float]:
    sink = ListSink()
    with tempfile.TemporaryDirectory() as out:
        loop = build_run(config_for(mode, args), out_dir=Path(out), cache_dir=ROOT / "cache", sink=sink)
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
    return row


PARTS = ("rollout", "old_logprobs", "ref_logprobs", "update")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
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
