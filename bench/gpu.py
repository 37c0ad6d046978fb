"""The torch backend on one GPU in one call: correctness checks, then rollout speed against `generate`, the update's
MFU and peak memory for randomly initialised models with the shapes of SmolLM2-135M, Qwen2.5-0.5B and Qwen2.5-3B.

    python3 bench/gpu.py --out "$OUT"                       # on the GPU machine, from the repository root
    .venv/bin/python bench/gpu.py --device cpu --tiny --out /tmp/gpu   # the same script end to end on a CPU

Nothing is downloaded: models are built from `transformers` configs written here (random weights), and the tokenizer
is a byte-level one built in code (ChatML template), so prompts count about one token per character. Each section
runs in its own subprocess with a time cap (the whole run ends within `--budget` seconds, 450 by default), so a
slow or failing section loses only its own rows. Writes `gpu.md` (the tables) and `gpu.log` (everything printed,
per section) into `--out`, and prints the tables.

Sections:
- `checks`: a 5e-7 AdamW step under bf16-mixed changes the float32 master weights on the device (and the same step
  on bfloat16 weights, the failure mode); the tiny model's log-probs on the device equal the CPU's (float32 on both,
  and bf16-mixed on the device against float32 on the CPU), printed with their largest difference.
- one section per shape, G = 5: rollout tokens/s of the engine (bfloat16 copy, as `backend.precision` 'bf16-mixed'
  rolls out) against `generate` on a bfloat16 model, both sampling exactly `--new-tokens` tokens per row; then one
  GRPO update under bf16-mixed on those rollouts (after a warm-up update), its MFU against the bf16 dense peak
  (`--peak-tflops`, 989 for an H100/H200 SXM), and the peak memory of the rollout and of the update.

MFU counts 2·N FLOPs per token for the reference pass and 6·N for the loss pass (forward and backward), N the
parameters outside the (tied) embedding, over the tokens the update actually reads (each group's prompt once, as the
shared-prefix path does, plus every response), plus the same 8 FLOPs per output-head weight for each trained token
(the only rows the head runs on); the recomputation of checkpointed layers and attention's own FLOPs are not
counted, so the figure is a lower bound of the hardware's use.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES: dict[str, dict[str, Any]] = {
    "SmolLM2-135M": dict(
        arch="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
        max_position_embeddings=8192, rms_norm_eps=1e-5,
    ),
    "Qwen2.5-0.5B": dict(
        arch="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
    ),
    "Qwen2.5-3B": dict(
        arch="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
    ),
}  # fmt: skip
"""The published configs' shapes (hidden, MLP, layers, heads, vocabulary, tied embeddings)."""

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
"""`--tiny` replaces each shape's size by this (same vocabulary and architecture), for a CPU run of the script."""

SECTION_CAPS = {"checks": 75, "SmolLM2-135M": 90, "Qwen2.5-0.5B": 100, "Qwen2.5-3B": 150}
"""Seconds each section may run (subprocess killed after), before the overall budget cuts them further."""

INSTRUCTION = (
    "Answer the question. Think inside <think> and </think>; search with <search> query </search> when you lack "
    "knowledge; give the short answer inside <answer> and </answer>."
)
QUESTIONS = [
    "What is the capital of Peru?", "Who wrote the play Hamlet?", "Which river flows through Paris?",
    "In which year did the Berlin Wall fall?", "Who painted the ceiling of the Sistine Chapel?",
    "What is the largest planet of the solar system?", "Which element has the chemical symbol Fe?",
    "Who was the first person to walk on the Moon?", "What is the official language of Brazil?",
    "Which ocean lies between Africa and Australia?", "Who composed the Four Seasons?",
    "What is the tallest mountain in Africa?", "Which country has the most islands?",
    "What is the boiling point of water in Kelvin?", "Who discovered penicillin?", "What is the currency of Japan?",
]  # fmt: skip
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# -- building blocks (imported lazily: the parent process never imports torch) ---------------------------------


def byte_tokenizer() -> Any:
    """A byte-level tokenizer (256 byte tokens and the ChatML specials) with a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    raw = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens(["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    tokenizer.padding_side = "left"
    return tokenizer


def build_model(shape: dict[str, Any], device: Any, *, tiny: bool, seed: int = 0) -> Any:
    """A randomly initialised float32 causal LM of `shape`, created directly on `device`, in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in shape.items() if k != "arch"} | (TINY if tiny else {})
    values |= dict(bos_token_id=256, eos_token_id=257, pad_token_id=258)
    config = AutoConfig.for_model(shape["arch"], **values)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_memory_gb(device: Any) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None


def reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def train_samples(tokenizer: Any, *, group: int, questions: int, prompt_len: int, response_len: int) -> list[Any]:
    """GRPO samples with random response tokens (mask 1, with an 8-token observation of mask 0 in the middle),
    `group` rollouts per prompt, advantages ±1 within each group."""
    import torch

    from inspo_engine.backends.torch.samples import TrainSample

    generator = torch.Generator().manual_seed(0)
    out = []
    for q in range(questions):
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{INSTRUCTION}\nQuestion: {QUESTIONS[q % len(QUESTIONS)]}"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)[:prompt_len]
        for g in range(group):
            ids = torch.randint(0, 256, (response_len,), generator=generator).tolist()
            mask = [1] * response_len
            middle = response_len // 2
            mask[middle : middle + 8] = [0] * 8
            out.append(TrainSample(prompt_ids, ids, mask, 1.0 if g % 2 == 0 else -1.0))
    return out


# -- section: correctness -----------------------------------------------------------------------------------------


def section_checks(args: argparse.Namespace) -> list[dict[str, Any]]:
    import copy

    import torch

    from inspo_engine.backends.torch.grpo import GRPOTrainer
    from inspo_engine.config import GRPOConfig

    device = torch.device(args.device)
    tokenizer = byte_tokenizer()
    rows: list[dict[str, Any]] = []
    base = build_model(SHAPES["SmolLM2-135M"], torch.device("cpu"), tiny=True)
    samples = train_samples(tokenizer, group=2, questions=2, prompt_len=96, response_len=24)
    config = GRPOConfig(group_size=2, batch_size=2, mini_batch_size=2, micro_batch_size=2, lr=5e-7, warmup_ratio=0.0)
    for label, dtype, compute in (
        ("bf16-mixed (float32 masters)", torch.float32, torch.bfloat16),
        ("bfloat16 weights (failure mode)", torch.bfloat16, None),
    ):
        policy = copy.deepcopy(base).to(device=device, dtype=dtype).requires_grad_(True)
        trainer = GRPOTrainer(policy, tokenizer, config, device=device, compute_dtype=compute)
        before = [p.detach().clone() for p in policy.parameters()]
        trainer.update(samples)
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(policy.parameters(), before, strict=True))
        share = changed / sum(b.numel() for b in before)
        rows.append({"check": f"5e-7 AdamW step, {label}: weights changed", "value": f"{share:.2%}"})
        print(rows[-1], flush=True)
    rows += logprob_agreement(base, tokenizer, samples, device)
    return rows


def logprob_agreement(base: Any, tokenizer: Any, samples: list[Any], device: Any) -> list[dict[str, Any]]:
    """The tiny model's trained-token log-probs on `device` (float32, then bf16-mixed) against the CPU's float32."""
    import copy

    import torch

    from inspo_engine.backends.torch.grpo import GRPOTrainer
    from inspo_engine.config import GRPOConfig

    config = GRPOConfig(group_size=2, batch_size=2, mini_batch_size=2, micro_batch_size=2)
    cpu = torch.device("cpu")

    def rows_on(where: Any, compute: Any) -> Any:
        policy = copy.deepcopy(base).to(where).requires_grad_(True)
        trainer = GRPOTrainer(policy, tokenizer, config, device=where, ref_model=copy.deepcopy(base).to(where),
                              compute_dtype=compute)  # fmt: skip
        return torch.cat(trainer.logprob_rows(policy, samples)).float().cpu()

    reference = rows_on(cpu, None)
    out = []
    for label, compute in (("float32", None), ("bf16-mixed", torch.bfloat16)):
        theirs = rows_on(device, compute)
        gap = (theirs - reference).abs()
        value = f"max {gap.max():.2e}, mean {gap.mean():.2e} over {gap.numel()} tokens"
        out.append({"check": f"tiny log-probs, {device.type} {label} vs cpu float32: abs Δ log p", "value": value})
        print(out[-1], "first 4:", theirs[:4].tolist(), "cpu:", reference[:4].tolist(), flush=True)
    return out


# -- section: one shape ---------------------------------------------------------------------------------------------


def section_shape(args: argparse.Namespace, name: str) -> list[dict[str, Any]]:
    import torch

    device = torch.device(args.device)
    deadline = time.monotonic() + args.section_budget
    tokenizer = byte_tokenizer()
    model = build_model(SHAPES[name], device, tiny=args.tiny).requires_grad_(True)
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    row: dict[str, Any] = {"shape": name, "params_M": round(params / 1e6, 1), "G": args.group}
    row |= measure_rollouts(args, model, tokenizer, device, deadline)
    print(row, flush=True)
    if time.monotonic() < deadline:
        row |= measure_update(args, model, tokenizer, device, params - embedding, embedding)
    print(row, flush=True)
    return [row]


def measure_rollouts(args: argparse.Namespace, model: Any, tokenizer: Any, device: Any, deadline: float) -> dict:
    import copy

    import torch

    from inspo_engine.backends.torch.rollout import RolloutEngine, RolloutSettings
    from inspo_engine.env.protocol import Passage
    from inspo_engine.types import Question

    class Fixed(RolloutEngine):
        def _turn_over(self, row: Any, token: int) -> bool:
            super()._turn_over(row, token)  # keep the cost of stop detection
            return len(row.turn_ids) >= self.settings.max_turn_tokens

    class Passages:
        def search(self, queries: Any, k: int) -> list[list[Passage]]:
            return [[Passage("0", "Lima", "Lima is the capital of Peru.")] * k for _ in queries]

    new = args.new_tokens
    settings = RolloutSettings(max_turns=0, max_turn_tokens=new, max_obs_tokens=64, max_prompt_length=4096, top_k=1)
    engine = Fixed(model, tokenizer, Passages(), settings, device=device, weights_dtype=torch.bfloat16,
                   record_logprobs=True)  # fmt: skip
    items = [(INSTRUCTION, Question(f"q{i}", QUESTIONS[i % len(QUESTIONS)], ["x"])) for i in range(args.questions)]
    items = [item for item in items for _ in range(args.group)]
    out: dict[str, Any] = {"rows": len(items), "new_tokens": new}

    def ours() -> Any:
        return engine.generate(items, generator=torch.Generator(device=device).manual_seed(0))

    reset_peak(device)
    seconds, samples = timed_best(ours, device, repeats=2, deadline=deadline)
    out |= {"ours_tok_s": round(len(items) * new / seconds), "rollout_peak_GB": peak_memory_gb(device)}
    out["prompt_tokens"] = len(samples[0].prompt_ids)
    hf = copy.deepcopy(model).to(torch.bfloat16).eval()
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": f"{i}\nQuestion: {q.text}"}],
                                           tokenize=False, add_generation_prompt=True) for i, q in items]  # fmt: skip
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)

    def generate() -> Any:
        with torch.inference_mode():
            return hf.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new,
                               min_new_tokens=new, pad_token_id=tokenizer.pad_token_id)  # fmt: skip

    if time.monotonic() < deadline:
        hf_seconds, _ = timed_best(generate, device, repeats=2, deadline=deadline)
        out |= {"hf_tok_s": round(len(items) * new / hf_seconds), "speedup": round(hf_seconds / seconds, 2)}
    model.rollout_samples = samples  # handed to the update measurement
    return out


def timed_best(work: Any, device: Any, *, repeats: int, deadline: float) -> tuple[float, Any]:
    """The fastest of up to `repeats` runs (the first includes warm-up); stops early past `deadline`."""
    best, result = float("inf"), None
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = work()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
        if time.monotonic() > deadline:
            break
    return best, result


def measure_update(args: argparse.Namespace, model: Any, tokenizer: Any, device: Any, dense: int, head: int) -> dict:
    import torch

    from inspo_engine.backends.torch.backend import GPU_FORWARD_TOKENS
    from inspo_engine.backends.torch.grpo import FORWARD_TOKENS, GRPOTrainer
    from inspo_engine.backends.torch.samples import TrainSample
    from inspo_engine.config import GRPOConfig

    rollouts = model.rollout_samples
    del model.rollout_samples
    samples = [
        TrainSample(s.prompt_ids, s.response_ids, s.response_mask, 1.0 if i % 2 == 0 else -1.0,
                    rollout_logprobs=s.rollout_logprobs)
        for i, s in enumerate(rollouts)
    ]  # fmt: skip
    q = args.questions
    config = GRPOConfig(group_size=args.group, batch_size=q, mini_batch_size=q, micro_batch_size=q, lr=5e-7,
                        warmup_ratio=0.0, total_steps=10, rollout_correction="tis")  # fmt: skip
    budget = FORWARD_TOKENS if device.type == "cpu" else GPU_FORWARD_TOKENS
    reset_peak(device)
    trainer = GRPOTrainer(model, tokenizer, config, device=device, reference_storage=torch.bfloat16,
                          compute_dtype=torch.bfloat16, forward_tokens=budget)  # fmt: skip
    trainer.update(samples)  # warm-up
    synchronize(device)
    start = time.perf_counter()
    result = trainer.update(samples)
    synchronize(device)
    seconds = time.perf_counter() - start
    groups = {tuple(s.prompt_ids) for s in samples}
    tokens = sum(len(p) for p in groups) + sum(len(s.response_ids) for s in samples)
    trained = sum(sum(s.response_mask) for s in samples)
    # 2 FLOPs per weight and token for the reference forward, 6 for the loss pass (forward and backward); the output
    # head (vocabulary × hidden) runs only on the trained tokens
    flops = 8 * dense * tokens + 8 * head * trained
    out = {"update_s": round(seconds, 3), "update_tokens": tokens, "TFLOP/s": round(flops / seconds / 1e12, 1)}
    if args.peak_tflops:
        out["MFU_%"] = round(100 * flops / seconds / 1e12 / args.peak_tflops, 1)
    out["update_peak_GB"] = peak_memory_gb(device)
    out |= {k: float(f"{v:.3g}") for k, v in result.metrics.items() if k.startswith("rollout_")}
    return out


# -- the parent: sections in subprocesses, the tables -------------------------------------------------------------


def run_section(args: argparse.Namespace, name: str, cap: float, log: Any) -> list[dict[str, Any]]:
    result = Path(args.out) / f".{name}.json"
    result.unlink(missing_ok=True)
    budget = str(max(cap - 25, 10))
    command = [sys.executable, __file__, "--section", name, "--result", str(result), "--section-budget", budget]
    command += forwarded(args)
    log.write(f"\n===== {name} (cap {cap:.0f} s): {' '.join(command)}\n")
    log.flush()
    started = time.monotonic()
    try:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=cap, check=False, cwd=REPO)
    except subprocess.TimeoutExpired:
        log.write(f"\n[{name}: killed after its cap of {cap:.0f} s]\n")
    log.write(f"[{name}: {time.monotonic() - started:.1f} s]\n")
    log.flush()
    if result.is_file():
        rows: list[dict[str, Any]] = json.loads(result.read_text())
        result.unlink()
        return rows
    return [{"shape" if name in SHAPES else "check": name, "error": "no result (see gpu.log)"}]


def forwarded(args: argparse.Namespace) -> list[str]:
    out = ["--device", args.device, "--out", args.out, "--new-tokens", str(args.new_tokens), "--group",
           str(args.group), "--questions", str(args.questions), "--peak-tflops", str(args.peak_tflops)]  # fmt: skip
    return out + (["--tiny"] if args.tiny else [])


def table(rows: list[dict[str, Any]]) -> str:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def environment(args: argparse.Namespace) -> str:
    """The machine, in one paragraph (torch imported in a subprocess so that a broken CUDA cannot stop the parent)."""
    probe = (
        "import torch, transformers, platform; d = torch.cuda.is_available();"
        "print(f'torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
        "python {platform.python_version()}; device: ' + (torch.cuda.get_device_name(0) + ', ' + "
        "str(round(torch.cuda.get_device_properties(0).total_memory / 2**30)) + ' GiB' if d else 'no CUDA'))"
    )
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        return (done.stdout or done.stderr).strip()
    except subprocess.TimeoutExpired:
        return "environment probe timed out"


def main() -> None:
    args = parse_args()
    if args.section:
        run_child(args)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    shapes = [s for s in SHAPES if s in args.shapes]
    with (out / "gpu.log").open("a") as log:
        env = environment(args)
        log.write(f"{env}\n")
        results: dict[str, list[dict[str, Any]]] = {}
        for name in ["checks", *shapes]:
            left = args.budget - (time.monotonic() - started)
            cap = min(SECTION_CAPS[name] * (0.5 if args.tiny else 1.0), left - 5)
            if cap < 15:
                results[name] = [{"section": name, "error": "skipped: the time budget ran out"}]
                continue
            results[name] = run_section(args, name, cap, log)
    report = render(args, env, results, time.monotonic() - started)
    (out / "gpu.md").write_text(report)
    print(report)


def render(args: argparse.Namespace, env: str, results: dict[str, list[dict[str, Any]]], seconds: float) -> str:
    checks = results.pop("checks")
    shapes = [row for rows in results.values() for row in rows]
    peak = f"{args.peak_tflops:g} TFLOP/s" if args.peak_tflops else "none given"
    return "\n".join([
        f"# bench/gpu.py on {args.device}{' (tiny shapes)' if args.tiny else ''}", "", env, "",
        f"Command: `python3 bench/gpu.py {' '.join(forwarded(args))}`; {seconds:.0f} s in all.", "",
        "## Correctness", "", table(checks), "",
        f"## Rollout and update, G = {args.group} (bf16 peak for MFU: {peak})", "", table(shapes), "",
        "ours_tok_s / hf_tok_s: sampled tokens per second of the engine (bfloat16 copy) and of `generate` on a",
        "bfloat16 model, exactly new_tokens per row, best of 2 runs. update_s: one bf16-mixed GRPO update (reference",
        "pass, loss forward and backward with checkpointed layers, AdamW), after a warm-up update. MFU counts",
        "8·N·update_tokens + 8·head·trained tokens FLOPs (N without the tied embedding; see the script's docstring).",
        "Peaks: torch.cuda.max_memory_allocated. rollout_*: the mismatch between the bf16 rollout copy and the",
        "bf16-mixed update (`grpo.rollout_correction` 'tis' on).", "",
    ])  # fmt: skip


def run_child(args: argparse.Namespace) -> None:
    try:
        rows = section_checks(args) if args.section == "checks" else section_shape(args, args.section)
    except Exception as error:  # one section's failure must not lose the others
        traceback.print_exc()
        key = "check" if args.section == "checks" else "shape"
        rows = [{key: args.section, "error": f"{type(error).__name__}: {str(error)[:200]}"}]
    Path(args.result).write_text(json.dumps(rows))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    parser.add_argument("--tiny", action="store_true", help="2-layer, 64-wide models (a CPU check of the script)")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--group", type=int, default=5)
    parser.add_argument("--questions", type=int, default=16, help="questions per batch (rows = questions × group)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak; 0: no MFU column")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    parser.add_argument("--section", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--section-budget", type=float, default=60.0, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    main()
