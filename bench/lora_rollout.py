"""LoRA's rollout weights: the same decoding (a 16 x 48 prefill, then 24 cached decode steps, greedy) through
SmolLM2-135M-Instruct with every weight (full), through peft's model with rank-16 adapters on every projection
(unmerged: each linear layer runs its adapter branch beside it), and through the merged copy the rollout engine now
reads (`RolloutWeights`); interleaved rounds in one process, two threads. Prints each one's median and minimum.

    .venv/bin/python bench/lora_rollout.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inspo_engine.backends.torch.model import load_policy
from inspo_engine.backends.torch.rollout_weights import RolloutWeights
from inspo_engine.models import SMOLLM2, resolve_model

BATCH, PROMPT, STEPS = 16, 48, 24


def decode(model: Any, ids: torch.Tensor) -> None:
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(STEPS):
            out = model(input_ids=token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)


def main() -> None:
    from peft import LoraConfig, get_peft_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    rounds = parser.parse_args().rounds
    torch.set_num_threads(2)
    path = resolve_model(SMOLLM2, Path("cache") / "test-models")
    base, _ = load_policy(path, device=torch.device("cpu"), dtype=torch.float32)
    full = copy.deepcopy(base).eval()
    adapters = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")).eval()
    models = {"full": full, "lora unmerged": adapters, "lora merged": RolloutWeights(adapters, None).current()}
    ids = torch.randint(0, 1000, (BATCH, PROMPT))
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            started = time.perf_counter()
            decode(model, ids)
            times[name].append(time.perf_counter() - started)
    reference = statistics.median(times["full"])
    print(f"| weights ({rounds} rounds, prefill {BATCH}x{PROMPT} + {STEPS} steps) | median | min | against full |")
    print("|---|---|---|---|")
    for name, measured in times.items():
        median = statistics.median(measured)
        print(f"| {name} | {median:.2f} s | {min(measured):.2f} s | {median / reference:.2f} |")


if __name__ == "__main__":
    main()
