"""Where the time of a LoRA update goes, and what each way of keeping activations would buy: one GRPO update of full
fine-tuning and of LoRA (rank 16, every projection) on the cpu-demo's shapes, in bf16-mixed, under four policies
for the decoder blocks' activations during backward:

- `layers`: the trainer's own (`GRPOTrainer.checkpoint_layers`): each block keeps its input and runs again in
  backward, so its products run three times for LoRA (forward, again, input gradient) and four for full
  fine-tuning (plus the weight gradient);
- `none`: every activation kept, nothing runs again;
- `products`: selective checkpointing that keeps the output of every matrix product (`aten.mm`) and recomputes only
  the cheap rest (norms, activations, rotary embedding) in backward;
- `base-products`: the same, but it keeps only the products of the frozen weights (not the adapters' thin ones).

Each setting runs in a process of its own (its peak resident set is that process's `VmHWM`): the backend is built
and updates `--rounds` times on the same samples, those the first setting rolled out (`--questions` × `--group`
from a fixed generator state, kept in a file for the others); the median update time, the first left out, is
printed with the peak. Prints a markdown table.

    .venv/bin/python bench/lora_update.py [--questions 2] [--group 4] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from lora import build, high_water_kib, samples_of  # noqa: E402

POLICIES = ("layers", "none", "products", "base-products")


def keep_products(only_wide: bool) -> Any:
    """A selective-checkpointing policy: keep each matrix product's output (only_wide: only those whose weight is not
    an adapter's, i.e. both sides wider than 64), recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    products = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in products and not (only_wide and min(args[-1].shape[-2:]) <= 64):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply(policy: str, backend: Any) -> None:
    """Set the blocks' activation policy on the backend's trainer."""
    if policy == "none":
        backend.trainer.checkpoint_layers = False
    elif policy in ("products", "base-products"):
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        from inspo_engine.backends.torch import logits

        context = functools.partial(create_selective_checkpoint_contexts, keep_products(policy == "base-products"))
        logits.checkpoint = functools.partial(checkpoint, context_fn=context)  # type: ignore[attr-defined]


def child(args: argparse.Namespace) -> None:
    backend, requests = build(args.variant, "bf16-mixed", args)
    apply(args.policy, backend)
    if args.samples.is_file():
        samples = torch.load(args.samples, weights_only=False)
    else:
        backend.generator.manual_seed(0)
        samples = samples_of(backend.rollout(requests, args.group))
        torch.save(samples, args.samples)
    times = [backend.trainer.update(samples).timings["update"] for _ in range(args.rounds)]
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    out = {"update": statistics.median(times[1:] or times), "rss": high_water_kib() * 1024 / 1e9, "tokens": tokens}
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="updates per setting; the first is not counted")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", choices=("full", "lora16"), help=argparse.SUPPRESS)
    parser.add_argument("--policy", choices=POLICIES, help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.variant:
        child(args)
        return
    print(f"cpu-demo shapes, {args.questions} questions × {args.group} replies, bf16-mixed, {args.threads} threads")
    print()
    print("| policy | activations | tokens | update s | peak RSS GB | update × (vs full, layers) |")
    print("|---|---|---:|---:|---:|---:|")
    baseline = None
    samples = Path(tempfile.mkdtemp()) / "samples.pt"
    for variant in ("full", "lora16"):
        for policy in POLICIES:
            command = [sys.executable, __file__, "--variant", variant, "--policy", policy, "--samples", str(samples)]
            command += ["--questions", str(args.questions), "--group", str(args.group)]
            command += ["--rounds", str(args.rounds), "--threads", str(args.threads)]
            result = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            measured = json.loads(result.strip().splitlines()[-1])
            baseline = baseline or measured["update"]
            print(
                f"| {variant} | {policy} | {measured['tokens']} | {measured['update']:.2f} | {measured['rss']:.2f} | "
                f"{baseline / measured['update']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
