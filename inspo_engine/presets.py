"""The presets (paper, cpu-demo, quick, smoke) and their prompt texts; config.py owns the schema and its validation."""

from __future__ import annotations

import copy
import typing
from typing import Any

from .config import PAPER_BENCHMARKS, SEED_INSTRUCTION, RunConfig
from .config_fields import ConfigError, FieldError


def _paper() -> dict[str, Any]:
    """App. B and Sec. 4: Qwen2.5-3B-base on the verl backend; every other number is the dataclass default."""
    return {
        "backend": {"name": "verl", "model": "Qwen/Qwen2.5-3B", "device": "cuda"},
        "eval": {"benchmarks": list(PAPER_BENCHMARKS)},
    }


CPU_DEMO_EXAMPLE = (
    "Always search before you answer, naming what the question asks about: for 'What is the capital of Peru?' "
    "search <search> capital of Peru </search>, and for 'Which currency does Japan use?' search <search> currency "
    "of Japan </search>. Reply in this shape: <think> what I must find </think>, then your search, then, once the "
    "passages arrive in <information> and </information>: <think> what the passages say </think> <answer> the "
    "short answer </answer>"
)
"""The cpu-demo's hand-written second instruction: the seed plus a template of the protocol. Its searches are shown
only as two questions with the query each deserves, never as a slot in the template: the policy copies a slot's
text ('<search> a short query </search>', '<search> … </search>') into every search, which retrieves the same
unrelated passage for every question, while after worked pairs the untrained model writes the asked-about entity
('capital of Aruba', 'currency of Angola')."""


CPU_DEMO_SEED = SEED_INSTRUCTION.replace(
    "give only the final short answer inside <answer> and </answer>, for example <answer> Paris </answer>.",
    "give only the final short answer, copied from the passages, inside <answer> and </answer>.",
)
"""The cpu-demo's seed instruction: the paper's seed without its example answer, asking for the short answer as the
passages write it. With the example the 135M policy searched for "Paris" and answered "Paris" to 122 of 195 test
questions (the cpu-demo journal, attempt 13); without it, its answers quoted the passages in a 16-step probe
(attempt 14), and by step 40 both policies copied the opening's sentence instead (attempt 15)."""


CPU_DEMO_OPENING = "<think> I will search for what the question asks about. </think>\n<search>"
"""How every cpu-demo reply opens: a short thought and an open search whose query the policy writes. Left to choose,
the 135M model searched in none of 128 sampled replies and RL drove it to answers from memory; opened this way it
writes a query in every reply and reads the passages (in 40 steps it learns the protocol, not yet to answer from
the passages: the cpu-demo journal). Its sentence is text the policy can copy, and by the end of attempt 15 both
policies answered most test questions with it."""


CPU_DEMO_ANSWER_OPENING = "<answer>"
"""What the environment writes after the cpu-demo's passages, opening the answer turn: the policy writes the answer's
words and closes the tag. Without it the policy had its own reply to copy between the passages and the answer slot,
and answered with the opening's sentence (attempt 15); with it the reward's spread is about the answer itself, and
by step 40 the static baseline of seed 0 answered 13 of 97 single-hop test questions correctly, from the passages
(attempt 17)."""


def _cpu_demo() -> dict[str, Any]:
    """A run that visibly learns the protocol and to answer in about 15 minutes on two idle cores that compute in
    bfloat16 (22 in float32; docs/precision.md): SmolLM2-135M in bf16 mixed precision, the format-aware reward
    weighted towards searching, a reply that opens with a search the policy completes, then an answer turn the
    environment opens with '<answer>', short turns, a population seeded with a template of the protocol, evolutions
    by the offline `rules` optimizer, and the final evaluation on the built-in test split."""
    return {
        "grpo": {
            "total_steps": 40,
            "group_size": 8,
            "batch_size": 4,
            "mini_batch_size": 4,
            "micro_batch_size": 4,
            "lr": 1e-5,
            "kl_coef": 0.05,
            "sampling_temperature": 0.7,
            "drop_uniform_groups": True,
        },
        "population": {
            "population_size": 4,
            "prune_every": 4,
            "seed_instruction": CPU_DEMO_SEED,
            "initial_instructions": [f"{CPU_DEMO_SEED} {CPU_DEMO_EXAMPLE}"],
        },
        "evolution": {
            "evolve_every": 8,
            "evolve_until": 32,
            "n_candidates": 3,
            "verify_samples": 10,
            "max_verify_rounds": 2,
        },
        "env": {
            "max_turns": 1,
            "max_turn_tokens": 40,
            "max_obs_tokens": 120,
            "max_prompt_length": 1024,
            "reward": "em_format",
            "format_score": 0.2,
            "retrieval_score": 0.0,
            "answer_score": 0.05,
            "format_requires_search": True,
            "f1_score": 0.3,
            "response_prefix": CPU_DEMO_OPENING,
            "final_turn_prefix": CPU_DEMO_ANSWER_OPENING,
        },
        "backend": {"device": "cpu", "max_new_tokens": 40, "reference_dtype": "bfloat16", "precision": "auto"},
        "optimizer": {"provider": "rules"},
        "eval": {"eval_every": 0, "eval_samples": 0},
        "checkpoint": {"checkpoint_every": 8, "keep_last": 1},
    }


def _quick() -> dict[str, Any]:
    """A first run that shows learning in minutes: the cpu-demo (its reward, openings and population) with 12 steps
    of 4 questions × 4 replies, evolutions at steps 4 and 8 verified on 4 questions, and an evaluation on 32 test
    questions before the first step (the untrained policy) and after the last; it keeps the checkpoints of steps 6
    and 12, the two a heatmap needs to tell whether the best instruction changes as the policy learns. The reward of
    the last steps is clearly above the first, most of it format credit: so short a run mostly teaches the protocol;
    over seeds 0-2 its evaluation on the 195 test questions went from EM 0.000 to 0.06-0.10 (docs/quickstart.md has
    the numbers)."""
    config = _cpu_demo()
    config["grpo"].update(total_steps=12, group_size=4, batch_size=4, mini_batch_size=4, micro_batch_size=4)
    config["population"].update(prune_every=4)
    config["evolution"].update(evolve_every=4, evolve_until=8, verify_samples=4, max_verify_rounds=1)
    config["eval"].update(eval_samples=32, eval_at_start=True)
    config["checkpoint"].update(checkpoint_every=6, keep_last=2)  # steps 6 and 12: a heatmap's two columns
    return config


def _smoke() -> dict[str, Any]:
    return {
        "grpo": {
            "total_steps": 4,
            "group_size": 2,
            "batch_size": 2,
            "mini_batch_size": 2,
            "micro_batch_size": 2,
            "lr": 1e-5,
        },
        "population": {"population_size": 3, "prune_every": 2},
        "evolution": {"evolve_every": 2, "evolve_until": 2, "n_candidates": 2, "n_failures": 2, "verify_samples": 2},
        "env": {"max_turns": 1, "max_turn_tokens": 24, "max_obs_tokens": 64, "max_prompt_length": 512},
        "backend": {"device": "cpu", "max_new_tokens": 24, "precision": "auto"},
        "optimizer": {"provider": "rules"},
        "eval": {"eval_every": 0, "eval_samples": 4},
        "checkpoint": {"checkpoint_every": 2, "keep_last": 2},
        "log_trajectories": 2,
    }


PRESETS: dict[str, typing.Callable[[], dict[str, Any]]] = {
    "paper": _paper,
    "cpu-demo": _cpu_demo,
    "quick": _quick,
    "smoke": _smoke,
}


def preset(name: str) -> RunConfig:
    """The named preset as a validated config."""
    if name not in PRESETS:
        raise ConfigError([FieldError("preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")])
    return RunConfig.from_dict(copy.deepcopy(PRESETS[name]()))
