"""Benchmark of the torch backend's rollout engine against transformers' `generate` and the machine's matmul ceiling.

    .venv/bin/python bench/rollout.py [--batch-questions 8 --group 5 --new-tokens 128 --threads N --repeats R]
                                      [--rollout-dtype policy|bfloat16] [--hf-dtype float32|bfloat16]
                                      [--precision fp32 bf16-mixed] [--device cpu|cuda]

Both sides sample (temperature 1, top-p 1) exactly `--new-tokens` tokens for each of batch-questions × group
prompts: `generate` with min_new_tokens = max_new_tokens, the engine with stop strings and EOS ignored for one turn
of that many tokens. Tokens/s counts generated tokens; the time includes reading the prompts. The ceiling turns the
GFLOP/s of a large float32 matmul into tokens/s at 2 × parameters FLOPs per token. The one-token runs time reading
the prompts, so the differences show the decoding speed alone. On a shared machine, use --repeats: runs are
interleaved and the fastest of each method is reported, with the CPU cores it got and the load average; the ratio
of the two full runs' CPU times is printed beside the speed-up.

The policy is float32, as the CPU backend loads it. `--rollout-dtype bfloat16` runs the engine on the bfloat16 copy
that `backend.rollout_dtype` configures, and then also measures the rollout/policy mismatch that copy causes over
the engine's sampled tokens (verl's `rollout_probs_diff` and more: see `mismatch`); `--hf-dtype bfloat16` runs
`generate` on a bfloat16 copy too, for a like-for-like comparison.

`--precision` runs the comparison like for like at each `backend.precision` named, into one table: `fp32` is the
float32 policy on both sides, `bf16-mixed` the engine on its bfloat16 rollout copy against `generate` on a bfloat16
copy (it replaces --rollout-dtype and --hf-dtype). `--device cuda` runs both sides on the GPU (the matmul ceiling is
then the GPU's float32 one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inspo_engine.backends.torch.backend import ROLLOUT_DTYPES  # noqa: E402
from inspo_engine.backends.torch.model import load_policy  # noqa: E402
from inspo_engine.backends.torch.precision import plan  # noqa: E402
from inspo_engine.backends.torch.rollout import RolloutEngine, RolloutSettings, _Row  # noqa: E402
from inspo_engine.backends.torch.rollout_weights import RolloutWeights  # noqa: E402
from inspo_engine.backends.torch.samples import RolloutSample  # noqa: E402
from inspo_engine.config import SEED_INSTRUCTION  # noqa: E402
from inspo_engine.env.protocol import Passage  # noqa: E402
from inspo_engine.models import SMOLLM2, resolve_model  # noqa: E402
from inspo_engine.types import Question  # noqa: E402

QUESTIONS = (
    "What is the capital of Peru?",
    "Who wrote the play Hamlet?",
    "Which river flows through Paris?",
    "In which year did the Berlin Wall fall?",
    "Who painted the ceiling of the Sistine Chapel?",
    "What is the largest planet of the solar system?",
    "Which element has the chemical symbol Fe?",
    "Who was the first person to walk on the Moon?",
    "What is the official language of Brazil?",
    "Which ocean lies between Africa and Australia?",
    "Who composed the Four Seasons?",
    "What is the tallest mountain in Africa?",
)


class FixedPassages:
    """A retriever that returns the same passages for every query."""

    def search(self, queries: Any, k: int) -> list[list[Passage]]:
        passage = Passage("0", "Lima", "Lima is the capital and the largest city of Peru.")
        return [[passage] * k for _ in queries]


class FixedLengthEngine(RolloutEngine):
    """The engine with stop strings and EOS ignored, so that every turn runs to its token budget."""

    def _turn_over(self, row: _Row, token: int) -> bool:
        super()._turn_over(row, token)  # keep the cost of stop detection
        return len(row.turn_ids) >= self.settings.max_turn_tokens


@dataclass
class Timing:
    method: str
    tokens: int
    seconds: float
    cpu_seconds: float
    load: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


DEVICE = torch.device("cpu")
"""Where both sides run (`--device`)."""


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(method: str, tokens: int, work: Callable[[], object]) -> Timing:
    synchronize()
    start, cpu = time.perf_counter(), time.process_time()
    work()
    synchronize()
    seconds = time.perf_counter() - start
    return Timing(method, tokens, seconds, time.process_time() - cpu, os.getloadavg()[0])


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(size, size, device=DEVICE), torch.randn(size, size, device=DEVICE)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        a @ b
        synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def hf_generate(model: Any, tokenizer: Any, items: list[tuple[str, Question]], new_tokens: int) -> None:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": instruction}, {"role": "user", "content": question.text}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for instruction, question in items
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(DEVICE)
    torch.manual_seed(0)  # generate samples from the global generator; this script owns it
    out = model.generate(
        **batch,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    assert out.shape[1] - batch["input_ids"].shape[1] == new_tokens


def fixed_length_engine(
    model: Any, tokenizer: Any, new_tokens: int, weights_dtype: torch.dtype | None = None
) -> FixedLengthEngine:
    settings = RolloutSettings(
        max_turns=0, max_turn_tokens=new_tokens, max_obs_tokens=500, max_prompt_length=4096, top_k=3
    )
    return FixedLengthEngine(model, tokenizer, FixedPassages(), settings, device=DEVICE, weights_dtype=weights_dtype)


def engine_generate(engine: RolloutEngine, items: list[tuple[str, Question]], new_tokens: int) -> list[RolloutSample]:
    samples = engine.generate(items, generator=torch.Generator(device=DEVICE).manual_seed(0))
    assert all(len(s.response_ids) == new_tokens and s.error is None for s in samples)
    return samples


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-questions", type=int, default=8)
    parser.add_argument("--group", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "cache" / "models")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each method; the fastest counts")
    parser.add_argument("--skip-hf", action="store_true", help="time only the engine (no speed-up line)")
    parser.add_argument(
        "--rollout-dtype", choices=sorted(ROLLOUT_DTYPES), default="policy", help="the engine's backend.rollout_dtype"
    )
    parser.add_argument("--hf-dtype", choices=["float32", "bfloat16"], default="float32", help="weights generate reads")
    parser.add_argument(
        "--precision", nargs="+", choices=["fp32", "bf16-mixed"], help="like-for-like runs at each, one table"
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    return parser.parse_args()


def main() -> None:
    global DEVICE
    args = parse_args()
    DEVICE = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(resolve_model(SMOLLM2, args.cache_dir), device=DEVICE, dtype=torch.float32)
    if args.precision:
        compare_precisions(args, model, tokenizer)
        return
    params = sum(p.numel() for p in model.parameters())
    items = batch_items(args)
    dtype = ROLLOUT_DTYPES[args.rollout_dtype]
    engines = [fixed_length_engine(model, tokenizer, n, dtype) for n in (args.new_tokens, 1)]
    hf_model = RolloutWeights(model, torch.bfloat16 if args.hf_dtype == "bfloat16" else None).current()
    with torch.inference_mode():
        engine_generate(fixed_length_engine(model, tokenizer, 2, dtype), items[:2], 2)  # warm-ups
        hf_generate(hf_model, tokenizer, items[:2], 2)
        gflops = matmul_gflops()
        best: list[Timing] = []
        for _ in range(args.repeats):  # interleaved; the fastest of each is kept (others share this machine)
            rows = ([] if args.skip_hf else time_hf(hf_model, tokenizer, items, args.new_tokens)) + time_engine(
                engines, items, args.new_tokens
            )
            best = [min(a, b, key=lambda t: t.seconds) for a, b in zip(best, rows, strict=True)] if best else rows
    report(args, params, gflops, best)
    copy = engines[0].weights.copy
    if copy is not None:
        with torch.inference_mode():
            measured = mismatch(model, copy, engine_generate(engines[0], items, args.new_tokens))
        print(
            "\nrollout/policy mismatch on the engine's sampled tokens: "
            + ", ".join(f"{name}={value:.4g}" for name, value in measured.items())
        )


def batch_items(args: argparse.Namespace) -> list[tuple[str, Question]]:
    questions = [Question(f"q{i}", QUESTIONS[i % len(QUESTIONS)], ("",)) for i in range(args.batch_questions)]
    return [(SEED_INSTRUCTION, q) for q in questions for _ in range(args.group)]


def compare_precisions(args: argparse.Namespace, model: Any, tokenizer: Any) -> None:
    """`--precision`: for each precision, the engine and `generate` on the same weights' dtype, interleaved over
    --repeats (fastest kept), then one table with both and each precision's speed-up."""
    items = batch_items(args)
    sides = {}
    for precision in args.precision:
        dtype = plan(precision).rollout
        engine = fixed_length_engine(model, tokenizer, args.new_tokens, dtype)
        hf_model = RolloutWeights(model, dtype).current()
        with torch.inference_mode():
            engine_generate(fixed_length_engine(model, tokenizer, 2, dtype), items[:2], 2)  # warm-ups
            hf_generate(hf_model, tokenizer, items[:2], 2)
        sides[precision] = (engine, hf_model)
    best: dict[tuple[str, str], Timing] = {}
    tokens = len(items) * args.new_tokens
    with torch.inference_mode():
        for _ in range(args.repeats):
            for precision, (engine, hf_model) in sides.items():
                runs = [
                    timed("generate", tokens, lambda m=hf_model: hf_generate(m, tokenizer, items, args.new_tokens)),
                    timed("RolloutEngine", tokens, lambda e=engine: engine_generate(e, items, args.new_tokens)),
                ]
                for run in runs:
                    key = (precision, run.method)
                    best[key] = min(best.get(key, run), run, key=lambda t: t.seconds)
    print(
        f"SmolLM2-135M-Instruct on {DEVICE.type}, {torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs; "
        f"batch {args.batch_questions} questions × G = {args.group}, {args.new_tokens} new tokens each, fastest of "
        f"{args.repeats}\n"
    )
    print("| precision | generate tokens/s | RolloutEngine tokens/s | speed-up | by CPU time | load avg (1 min) |")
    print("|---|---|---|---|---|---|")
    for precision in sides:
        hf, ours = best[(precision, "generate")], best[(precision, "RolloutEngine")]
        print(
            f"| {precision} | {hf.rate:.1f} | {ours.rate:.1f} | {ours.rate / hf.rate:.2f} | "
            f"{hf.cpu_seconds / ours.cpu_seconds:.2f} | {max(hf.load, ours.load):.2f} |"
        )


def time_engine(engines: list[FixedLengthEngine], items: list[tuple[str, Question]], new_tokens: int) -> list[Timing]:
    """The full run, then a one-token run (reading the prompts) to split prompt reading from decoding."""
    full, one = engines
    return [
        timed("RolloutEngine", len(items) * new_tokens, lambda: engine_generate(full, items, new_tokens)),
        timed("RolloutEngine, 1 token (prompts)", len(items), lambda: engine_generate(one, items, 1)),
    ]


def mismatch(policy: Any, rollout: Any, samples: list[RolloutSample]) -> dict[str, float]:
    """How the rollout weights' next-token distributions differ from the policy's at every sampled response token.

    - `probs_diff_mean` / `probs_diff_max`: |π_rollout(token) − π_policy(token)| (verl's `rollout_probs_diff`);
    - `logprob_diff_mean`: mean |log π_rollout(token) − log π_policy(token)|;
    - `kl_mean`: the exact KL(π_rollout ‖ π_policy) over the vocabulary, averaged over positions;
    - `ratio_outside_clip`: share of tokens whose importance ratio π_policy / π_rollout leaves [0.8, 1.2] (the
      update's clip range; it treats the rollout as the policy's own, ratio 1);
    - `greedy_agreement`: share of positions where both put the most weight on the same token.
    """
    totals = {"probs_diff_mean": 0.0, "logprob_diff_mean": 0.0, "kl_mean": 0.0, "ratio_outside_clip": 0.0}
    probs_diff_max, agree, count = 0.0, 0, 0
    for sample in samples:
        ids = torch.tensor([sample.prompt_ids + sample.response_ids], device=DEVICE)
        start, targets = len(sample.prompt_ids), torch.tensor(sample.response_ids, device=DEVICE)
        log_p, log_r = (
            torch.log_softmax(model(input_ids=ids).logits[0, start - 1 : -1].float(), dim=-1)
            for model in (policy, rollout)
        )
        token_p, token_r = (lp.gather(-1, targets[:, None]).squeeze(-1) for lp in (log_p, log_r))
        diff = (token_r.exp() - token_p.exp()).abs()
        totals["probs_diff_mean"] += float(diff.sum())
        totals["logprob_diff_mean"] += float((token_r - token_p).abs().sum())
        totals["kl_mean"] += float((log_r.exp() * (log_r - log_p)).sum())
        totals["ratio_outside_clip"] += float(((token_p - token_r).exp() - 1).abs().gt(0.2).sum())
        probs_diff_max = max(probs_diff_max, float(diff.max()))
        agree += int((log_p.argmax(-1) == log_r.argmax(-1)).sum())
        count += len(sample.response_ids)
    out = {name: total / count for name, total in totals.items()}
    return out | {"probs_diff_max": probs_diff_max, "greedy_agreement": agree / count, "tokens": float(count)}


def time_hf(model: Any, tokenizer: Any, items: list[tuple[str, Question]], new_tokens: int) -> list[Timing]:
    return [
        timed(
            "transformers generate", len(items) * new_tokens, lambda: hf_generate(model, tokenizer, items, new_tokens)
        ),
        timed("transformers generate, 1 token (prompts)", len(items), lambda: hf_generate(model, tokenizer, items, 1)),
    ]


def report(args: argparse.Namespace, params: int, gflops: float, rows: list[Timing]) -> None:
    ceiling = gflops * 1e9 / (2 * params)
    print(
        f"SmolLM2-135M-Instruct ({params / 1e6:.1f} M parameters), CPU float32 policy (engine: rollout_dtype "
        f"{args.rollout_dtype}, generate: {args.hf_dtype}), {torch.get_num_threads()} torch threads, "
        f"{os.cpu_count()} CPUs; batch {args.batch_questions} questions × G = {args.group}, {args.new_tokens} new "
        "tokens each"
    )
    print(f"float32 matmul ceiling: {gflops:.0f} GFLOP/s ≈ {ceiling:.0f} tokens/s\n")
    print("| method | tokens | seconds | tokens/s | fraction of ceiling | CPU use (cores) | load avg (1 min) |")
    print("|---|---|---|---|---|---|---|")
    for t in rows:
        print(
            f"| {t.method} | {t.tokens} | {t.seconds:.1f} | {t.rate:.1f} | {t.rate / ceiling:.2f} | "
            f"{t.cpu_seconds / t.seconds:.2f} | {t.load:.2f} |"
        )
    for full, one in zip(rows[::2], rows[1::2], strict=True):
        decode = (full.tokens - one.tokens) / (full.seconds - one.seconds)
        print(
            f"| {full.method}, decoding only (difference) | {full.tokens - one.tokens} | "
            f"{full.seconds - one.seconds:.1f} | {decode:.1f} | {decode / ceiling:.2f} | | |"
        )
    if len(rows) == 4:
        cpu_ratio = rows[0].cpu_seconds / rows[2].cpu_seconds
        print(f"\nrollout_speedup_vs_hf={rows[2].rate / rows[0].rate:.2f}")
        print(f"(by CPU time, which other processes disturb less: {cpu_ratio:.2f})")


if __name__ == "__main__":
    main()
