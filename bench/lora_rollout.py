"""LoRA's rollout weights: the same decoding (a 16 x 48 prefill, then 24 cached decode steps, greedy) through
SmolLM2-135M-Instruct with every weight (full), through peft's model with rank-16 adapters on every projection
(unmerged: each linear layer runs its adapter branch beside it), and through the merged copy the rollout engine now
reads (`RolloutWeights`); interleaved rounds in one process, two threads. Prints each one's median and minimum.

    .venv/bin/python bench/lora_rollout.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import copy
import statistics
import time
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model

from inspo_engine.backends.torch.model import SMOLLM2, load_policy, resolve_model
from inspo_engine.backends.torch.rollout import RolloutWeights

torch.set_num_threads(2)
base, tok = load_policy(
    resolve_model(SMOLLM2, Path("cache") / "test-models"), device=torch.device("cpu"), dtype=torch.float32
)
full = copy.deepcopy(base).eval()
peft = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")).eval()
merged = RolloutWeights(peft, None).current()
ids = torch.randint(0, 1000, (16, 48))


def decode(model, steps=24):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)


times = {"full": [], "lora unmerged": [], "lora merged": []}
for _ in range(4):
    for name, model in (("full", full), ("lora unmerged", peft), ("lora merged", merged)):
        t = time.perf_counter()
        decode(model)
        times[name].append(time.perf_counter() - t)
for name, ts in times.items():
    print(
        f"{name:14s} median {statistics.median(ts):.2f} s  min {min(ts):.2f} s  (4 rounds, prefill 16x48 + 24 decode steps)"
    )
print(
    "unmerged/full",
    round(statistics.median(times["lora unmerged"]) / statistics.median(times["full"]), 2),
    "merged/full",
    round(statistics.median(times["lora merged"]) / statistics.median(times["full"]), 2),
)
