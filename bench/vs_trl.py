"""One GRPO step of this project's torch backend against TRL's `GRPOTrainer`, on the same model, prompts and budget.

    .venv/bin/pip install -r requirements/bench.txt   # TRL, for this benchmark only
    .venv/bin/python bench/vs_trl.py [--prompts 16 --group 4 --tokens 128 --steps 4 --repeats 2 --threads 2]

Both sides train SmolLM2-135M-Instruct in float32 on the CPU, as the engine loads it, from the same initial weights:
the first `--prompts` built-in training questions with the seed instruction (single turn, no retrieval) × G rollouts,
each sampled (temperature 1, top-p 1, no top-k) to exactly `--tokens` tokens with EOS suppressed — TRL through
`generate` with min_new_tokens, ours through `RolloutEngine` with EOS masked and stop strings ignored — then one
optimizer step per rollout batch (one mini-batch, so old log-probs are the update's own) with the same learning rate,
KL coefficient (k3 estimator), clip ratio, gradient-norm clip, AdamW, cosine schedule without warm-up, sequence-mean
token-mean loss, gradient checkpointing and torch thread count. The reward is the share of distinct words in the
completion, so that advantages differ within a group; rewards, advantages and the loss are cheap on both sides.

Ours is `RolloutEngine` + `GRPOTrainer.update` on the shared-prefix path with its default forward-pass budget; TRL's
is `GRPOTrainer.train` as it ships. Phases are timed from outside TRL: `rollout` is its `_generate` (tokenising the
prompts, `generate`, decoding), `reference log-probs` its log-prob passes without gradient (the reference model's),
`whole step` the time between the `on_step_begin` and `on_step_end` callbacks; on our side the same phases come from
the engine call and the trainer's timings. On both sides `update` is the whole step minus the other two (rewards,
advantages, the policy's forward and backward, the optimizer step).

`--precision fp32 bf16-mixed` runs both frameworks at each precision into one table: `fp32` as above, `bf16-mixed`
TRL with `bf16=True` (autocast over float32 weights, as accelerate's mixed precision) against ours with
`backend.precision` 'bf16-mixed' (autocast over float32 masters, rollouts on a bfloat16 copy, bfloat16 reference).
`--device cuda` runs both on the GPU. Without TRL installed only our rows are measured (TRL's are marked skipped).

`--shape NAME` replaces SmolLM2's weights by a randomly initialised model in a published shape (SmolLM2-135M,
Qwen2.5-0.5B or Qwen2.5-3B, `bench/gpu.py`'s configs) and its tokenizer by `bench/gpu.py`'s byte-level one, so
nothing is downloaded (for a GPU machine that cannot fetch weights); `--tiny` shrinks that shape to a few layers (a
CPU check of the script). Both frameworks get the same random weights (the same seed). On CUDA every phase's clock
synchronises the device before it reads the time.

The frameworks alternate for `--repeats` rounds (the order flips every round), each round a fresh model and trainer
running `--steps` steps; a round's figure is the median of its steps 2..N, and each framework's faster round goes
into the table. `step_speedup_vs_trl` is TRL's whole step ÷ ours, from those rounds.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import trl
except ImportError:  # our side still runs; TRL's rows say it is missing
    trl = None
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402

from bench.gpu import SHAPES, build_model, byte_tokenizer  # noqa: E402
from bench.rollout import FixedLengthEngine, FixedPassages  # noqa: E402
from inspo_engine.backends.torch.backend import ROLLOUT_DTYPES  # noqa: E402
from inspo_engine.backends.torch.grpo import GRPOTrainer  # noqa: E402
from inspo_engine.backends.torch.losses import group_advantages  # noqa: E402
from inspo_engine.backends.torch.model import load_policy  # noqa: E402
from inspo_engine.backends.torch.precision import plan  # noqa: E402
from inspo_engine.backends.torch.rollout import RolloutSettings, _Row  # noqa: E402
from inspo_engine.backends.torch.samples import TrainSample  # noqa: E402
from inspo_engine.config import SEED_INSTRUCTION, GRPOConfig  # noqa: E402
from inspo_engine.env.datasets import load_questions  # noqa: E402
from inspo_engine.env.protocol import chat_messages  # noqa: E402
from inspo_engine.models import SMOLLM2, resolve_model  # noqa: E402
from inspo_engine.types import Question  # noqa: E402

DEVICE = torch.device("cpu")
"""Where both frameworks run (`--device`)."""
PHASES = {"rollout": "rollout", "ref_logprobs": "reference log-probs", "update": "update", "step": "whole step"}
TRL_NAME = f"TRL {trl.__version__} `GRPOTrainer`" if trl is not None else "TRL (not installed: skipped)"
FRAMEWORKS = {"inspo": "this project's torch backend (shared prefix)", "trl": TRL_NAME}


def distinct_words(completions: Sequence[str]) -> list[float]:
    """The share of distinct words in each completion: a cheap reward that differs within a group.

    >>> distinct_words(["to be or not to be", ""])
    [0.6666666666666666, 0.0]
    """
    return [len(set(words)) / len(words) if (words := text.split()) else 0.0 for text in completions]


def now() -> float:
    """The wall clock once the device has finished the work queued so far."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    return perf_counter()


class StepClock:
    """Wall seconds of each step and of its timed phases; `update` is the rest of the step."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.load = os.getloadavg()[0]
        self._current: dict[str, float] = {}
        self._start = 0.0

    def begin(self) -> None:
        self._current = {"rollout": 0.0, "ref_logprobs": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0}
        self._start = now()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = now()
        try:
            yield
        finally:
            self.add(name, now() - start)

    def add(self, name: str, value: float) -> None:
        self._current[name] += value

    def end(self) -> None:
        step = now() - self._start
        self._current |= {"step": step, "update": step - self._current["rollout"] - self._current["ref_logprobs"]}
        self.steps.append(self._current)

    def medians(self) -> dict[str, float]:
        """Median of every figure over steps 2..N (step 1 warms up allocators and caches)."""
        later = self.steps[1:] or self.steps
        return {key: statistics.median(step[key] for step in later) for key in self.steps[0]}


# -- this project's torch backend -------------------------------------------------------------------------------


class EosSuppressedEngine(FixedLengthEngine):
    """The fixed-length engine that never samples EOS, as `generate` does under min_new_tokens."""

    def _next_tokens(
        self, logits: torch.Tensor, rows: list[_Row], greedy: bool, generator: torch.Generator | None
    ) -> list[int]:
        eos = torch.tensor(sorted(self._eos), device=logits.device)
        return super()._next_tokens(logits.index_fill(1, eos, float("-inf")), rows, greedy, generator)


def run_inspo(args: argparse.Namespace, questions: list[Question], clock: StepClock, precision: str) -> None:
    model, tokenizer = load_model(args)
    dtypes = plan(precision, rollout_dtype=args.rollout_dtype)
    config = GRPOConfig(
        total_steps=args.steps,
        group_size=args.group,
        batch_size=len(questions),
        mini_batch_size=len(questions),
        micro_batch_size=len(questions),
        lr=args.lr,
        warmup_ratio=0.0,
        kl_coef=args.kl,
        clip_ratio=args.clip,
        max_grad_norm=args.max_grad_norm,
    )
    trainer = GRPOTrainer(
        model,
        tokenizer,
        config,
        device=DEVICE,
        seed=args.seed,
        path="shared_prefix",
        reference_storage=dtypes.reference,
        compute_dtype=dtypes.compute,
    )
    settings = RolloutSettings(
        max_turns=0, max_turn_tokens=args.tokens, max_obs_tokens=64, max_prompt_length=4096, top_k=1
    )
    engine = EosSuppressedEngine(
        trainer.model,
        tokenizer,
        FixedPassages(),
        settings,
        device=DEVICE,
        weights_dtype=dtypes.rollout,
    )
    generator = torch.Generator(device=DEVICE).manual_seed(args.seed)
    items = [(SEED_INSTRUCTION, question) for question in questions for _ in range(args.group)]
    for _ in range(args.steps):
        clock.begin()
        with clock.phase("rollout"):
            rollouts = engine.generate(items, generator=generator)
        rewards = distinct_words([r.response_text for r in rollouts])
        groups = [rewards[i : i + args.group] for i in range(0, len(rewards), args.group)]
        advantages = [a for group in group_advantages(groups) for a in group]
        samples = [
            TrainSample(r.prompt_ids, r.response_ids, r.response_mask, advantage)
            for r, advantage in zip(rollouts, advantages, strict=True)
        ]
        timings = trainer.update(samples).timings
        clock.add("ref_logprobs", timings["old_logprobs"] + timings["ref_logprobs"])
        clock.add("prompt_tokens", sum(len(s.prompt_ids) for s in samples))
        clock.add("completion_tokens", sum(len(s.response_ids) for s in samples))
        clock.end()


# -- TRL --------------------------------------------------------------------------------------------------------


def timed_trl_trainer() -> Any:
    """TRL's trainer with its generation and its log-prob passes without gradient timed, and its tokens counted."""
    assert trl is not None

    class TimedTRLTrainer(trl.GRPOTrainer):  # type: ignore[misc]
        clock: StepClock

        def _generate(self, prompts: list[Any]) -> Any:
            with self.clock.phase("rollout"):
                out = super()._generate(prompts)
            prompt_ids, completion_ids = out[0], out[1]
            self.clock.add("prompt_tokens", sum(len(ids) for ids in prompt_ids))
            self.clock.add("completion_tokens", sum(len(ids) for ids in completion_ids))
            return out

        def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():  # the policy's forward inside the loss
                return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            with self.clock.phase("ref_logprobs"):
                return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    return TimedTRLTrainer


class StepTimer(TrainerCallback):
    """Opens and closes the clock's step at TRL's step boundaries (the optimizer step included)."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        self.clock.begin()

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.clock.end()


def trl_reward(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    """`distinct_words` on TRL's conversational completions."""
    return distinct_words([completion[-1]["content"] for completion in completions])


def run_trl(args: argparse.Namespace, questions: list[Question], clock: StepClock, precision: str) -> None:
    from datasets import Dataset
    from datasets.table import InMemoryTable

    assert trl is not None
    model, tokenizer = load_model(args)
    prompts = [{"prompt": chat_messages(SEED_INSTRUCTION, q.text)} for q in questions] * args.steps
    with tempfile.TemporaryDirectory() as out:
        config = trl.GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=len(questions) * args.group,
            gradient_accumulation_steps=1,
            num_generations=args.group,
            max_completion_length=args.tokens,
            generation_kwargs={"min_new_tokens": args.tokens},
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            learning_rate=args.lr,
            lr_scheduler_type="cosine",
            weight_decay=0.01,  # torch's AdamW default, which ours uses
            optim="adamw_torch",
            beta=args.kl,
            epsilon=args.clip,
            max_grad_norm=args.max_grad_norm,
            loss_type="grpo",
            scale_rewards="group",
            gradient_checkpointing=True,
            bf16=precision == "bf16-mixed",
            use_cpu=DEVICE.type == "cpu",
            shuffle_dataset=False,
            seed=args.seed,
            logging_strategy="no",
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = timed_trl_trainer()(
            model=model,
            reward_funcs=trl_reward,
            args=config,
            # a fixed fingerprint: datasets' own hashes the table with dill, which failed on Python 3.12 (PicklingError)
            train_dataset=Dataset(InMemoryTable.from_pylist(prompts), fingerprint="vs-trl-prompts"),
            processing_class=tokenizer,
            callbacks=[StepTimer(clock)],
        )
        trainer.clock = clock
        trainer.remove_callback(PrinterCallback)
        torch.set_num_threads(args.threads)  # in case the trainer's setup changed it
        trainer.train()


# -- the comparison ---------------------------------------------------------------------------------------------


def load_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """A fresh copy of the initial policy, as the engine loads it (or the same random weights for `--shape`)."""
    if args.shape:
        return load_policy(random_checkpoint(args), device=DEVICE, dtype=torch.float32)
    return load_policy(resolve_model(SMOLLM2, args.cache_dir), device=DEVICE, dtype=torch.float32)


def random_checkpoint(args: argparse.Namespace) -> Path:
    """`--shape`'s random weights and the byte-level tokenizer, saved once: TRL loads its reference model by path."""
    path = Path(tempfile.gettempdir()) / f"vs-trl-{args.shape}{'-tiny' if args.tiny else ''}-seed{args.seed}"
    if not (path / "config.json").exists():
        build_model(SHAPES[args.shape], DEVICE, tiny=args.tiny, seed=args.seed).save_pretrained(path)
        byte_tokenizer().save_pretrained(path)
    return path


RUNNERS: dict[str, Callable[[argparse.Namespace, list[Question], StepClock, str], None]] = {
    "inspo": run_inspo,
    "trl": run_trl,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16, help="questions per step")
    parser.add_argument("--group", type=int, default=4, help="G: rollouts per question")
    parser.add_argument("--tokens", type=int, default=128, help="completion tokens of every rollout")
    parser.add_argument("--steps", type=int, default=4, help="steps per round; the median of steps 2..N counts")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of both frameworks, alternating")
    parser.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch's default)")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--kl", type=float, default=0.02, help="β of the k3 KL penalty")
    parser.add_argument("--clip", type=float, default=0.2, help="ε of the clipped ratio")
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rollout-dtype",
        choices=sorted(ROLLOUT_DTYPES),
        default="policy",
        help="our engine's backend.rollout_dtype (TRL always generates with the float32 policy)",
    )
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "cache" / "models")
    parser.add_argument("--precision", nargs="+", choices=["fp32", "bf16-mixed"], default=["fp32"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), help="random weights in this published shape, byte-level tokenizer"
    )
    parser.add_argument("--tiny", action="store_true", help="with --shape: a few small layers, for a CPU check")
    args = parser.parse_args()
    if args.tiny and not args.shape:
        parser.error("--tiny shrinks a --shape; name one")
    return args


def main() -> None:
    global DEVICE
    args = parse_args()
    DEVICE = torch.device(args.device)
    args.threads = args.threads or torch.get_num_threads()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    # TRL 1.16 still calls transformers' gradient_checkpointing* names, which warn that v6 renames them
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    questions = load_questions("builtin", "train")[: args.prompts]
    if len(questions) < args.prompts:
        sys.exit(f"the built-in training split has only {len(questions)} questions")
    frameworks = [name for name in FRAMEWORKS if name != "trl" or trl is not None]
    for precision in args.precision:
        rounds: dict[str, list[StepClock]] = {name: [] for name in frameworks}
        for repeat in range(args.repeats):
            for name in frameworks if repeat % 2 == 0 else frameworks[::-1]:
                torch.set_num_threads(args.threads)
                clock = StepClock()
                RUNNERS[name](args, questions, clock, precision)
                rounds[name].append(clock)
                print(f"round {repeat + 1}, {name}, {precision}: {clock.medians()}", flush=True)
                gc.collect()  # the round's models and optimizer state go before the next round builds its own
                if DEVICE.type == "cuda":
                    torch.cuda.empty_cache()
        report(args, rounds, precision)


def model_name(args: argparse.Namespace) -> str:
    if not args.shape:
        return "SmolLM2-135M-Instruct"
    return f"{args.shape} shape{' (tiny)' if args.tiny else ''}, random weights, byte-level tokenizer"


def device_name() -> str:
    return f" ({torch.cuda.get_device_name()})" if DEVICE.type == "cuda" else ""


def report(args: argparse.Namespace, rounds: dict[str, list[StepClock]], precision: str) -> None:
    medians = {name: [clock.medians() for clock in clocks] for name, clocks in rounds.items()}
    best = {name: min(rows, key=lambda row: row["step"]) for name, rows in medians.items()}
    loads = [clock.load for clocks in rounds.values() for clock in clocks]
    print(
        f"\n{model_name(args)}, {DEVICE}{device_name()}, precision {precision} (fp32: our rollouts' rollout_dtype "
        f"{args.rollout_dtype}), {args.threads} "
        f"torch thread(s) of {os.cpu_count()} CPUs, load avg "
        f"{min(loads):.1f}–{max(loads):.1f}; {args.prompts} prompts × G = {args.group}, {args.tokens} completion "
        f"tokens each; {args.repeats} alternating round(s) of {args.steps} steps; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {TRL_NAME}"
    )
    for name, row in best.items():
        print(
            f"{FRAMEWORKS[name]}: {row['prompt_tokens']:.0f} prompt + {row['completion_tokens']:.0f} completion "
            f"tokens per step"
        )
    print(
        f"\n| seconds per step (median of steps 2–{args.steps}, faster round) | "
        + " | ".join(PHASES.values())
        + " |\n|---|"
        + "---:|" * len(PHASES)
    )
    for name, row in best.items():
        print(f"| {FRAMEWORKS[name]}, {precision} | " + " | ".join(f"{row[key]:.2f}" for key in PHASES) + " |")
    if "trl" not in best:
        print(f"| {TRL_NAME} | " + " | ".join("–" for _ in PHASES) + " |")
        return
    ratios = [best["trl"][key] / best["inspo"][key] if best["inspo"][key] else float("nan") for key in PHASES]
    print("| TRL ÷ ours | " + " | ".join(f"{ratio:.2f}×" for ratio in ratios) + " |")
    per_round = [trl_row["step"] / ours["step"] for trl_row, ours in zip(medians["trl"], medians["inspo"], strict=True)]
    print(f"\nwhole-step speed-up in each round: {', '.join(f'{r:.2f}' for r in per_round)}")
    print(f"step_speedup_vs_trl={best['trl']['step'] / best['inspo']['step']:.2f}")


if __name__ == "__main__":
    main()
