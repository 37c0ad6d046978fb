"""TorchBackend: the PolicyBackend of one process (CPU or one GPU); it joins rollout, rewards and the GRPO trainer.

It knows tokens and weights; it knows nothing about the population or the optimizer LLM.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import torch

from ...checkpoints import MERGED_DIR, OPTIMIZER_DIR, POLICY_DIR
from ...config import RunConfig, loss_norm_tokens, reward_scaling
from ...env.protocol import Retriever
from ...env.rewards import REWARDS
from ...models import resolve_model
from ...policy import QuestionResult, UpdateResult
from ...types import Question, RolloutRequest, Trajectory
from . import heap
from .adapters import is_adapter, load_adapter, name_the_base, save_merged
from .grpo import FORWARD_TOKENS, GRPOTrainer
from .losses import scaled_advantages
from .model import load_policy, pick_device
from .precision import NARROW_DTYPES, plan, resolve
from .rollout import RolloutEngine, RolloutSettings
from .samples import RolloutSample, TrainSample

GENERATOR_FILE = "rollout_generator.pt"
ROLLOUT_DTYPES: dict[str, torch.dtype | None] = NARROW_DTYPES
"""`backend.rollout_dtype` → the dtype of the copy the rollout engine reads (None: the policy itself); likewise
`backend.reference_dtype` → the dtype the reference policy's weights are stored in (`backend.precision`
'bf16-mixed' makes both bfloat16)."""
TRAINING_DIR = OPTIMIZER_DIR
GPU_FORWARD_TOKENS = 16384
"""Most tokens of one training forward/backward pass on a GPU (the CPU's is `grpo.FORWARD_TOKENS`)."""


class TorchBackend:
    """Rolls out with the current policy, trains it with GRPO, scores instructions greedily (G = 1)."""

    name = "torch"

    def __init__(
        self,
        config: RunConfig,
        *,
        retriever: Retriever,
        cache_dir: Path,
        model_path: Path | None = None,
        score_batch: int = 32,
    ) -> None:
        self.device = pick_device(config.backend.device)
        self.on_cpu = self.device.type == "cpu"
        if self.on_cpu:
            heap.bound_kernel_cache()  # before this process's first bfloat16 product
        backend = config.backend
        self.precision = plan(
            resolve(backend.precision, self.device),
            rollout_dtype=backend.rollout_dtype,
            reference_dtype=backend.reference_dtype,
        )
        self.computes_in: str = self.precision.name
        # a LoRA checkpoint's policy/ is an adapter: the run's base model, with the adapter loaded below
        adapter = model_path if model_path is not None and is_adapter(model_path) else None
        if adapter is not None and not config.grpo.use_lora:
            raise ValueError(f"{adapter} holds LoRA adapters, but this config has grpo.use_lora off")
        path = resolve_model(backend.model, cache_dir) if adapter is not None or model_path is None else model_path
        self.model_name = backend.model
        self.base_path = path
        """The directory the policy's weights were loaded from (with LoRA: the frozen base the adapters sit on)."""
        self.total_steps = config.grpo.total_steps
        # the CPU's pass budget bounds its heap; a GPU runs larger passes (more work per kernel, same results)
        forward_tokens = FORWARD_TOKENS if self.on_cpu else GPU_FORWARD_TOKENS
        model, tokenizer = load_policy(path, device=self.device, dtype=self.precision.master)
        self.tokenizer = tokenizer
        # LoRA's initial adapters are random: drawn from the run's seed, so that the same seed trains the same run
        with torch.random.fork_rng(devices=[self.device.index or 0] if self.device.type == "cuda" else []):
            torch.manual_seed(config.seed)
            self.trainer = GRPOTrainer(
                model,
                tokenizer,
                dataclasses.replace(config.grpo, norm_tokens=loss_norm_tokens(config)),
                device=self.device,
                reference_storage=self.precision.reference,
                compute_dtype=self.precision.compute,
                forward_tokens=forward_tokens,
                checkpoint_layers=config.grpo.gradient_checkpointing,
            )
        settings = RolloutSettings.from_config(
            config.env,
            temperature=config.grpo.sampling_temperature,
            top_p=config.grpo.top_p,
            max_new_tokens=config.backend.max_new_tokens,
        )
        self.engine = RolloutEngine(
            self.trainer.model,
            tokenizer,
            retriever,
            settings,
            device=self.device,
            weights_dtype=self.precision.rollout,
            record_logprobs=self.precision.rollout is not None or config.grpo.rollout_correction == "tis",
        )
        if adapter is not None:
            assert self.trainer.peft is not None
            load_adapter(self.trainer.peft, adapter, self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.score_batch = score_batch
        self.drop_uniform_groups = config.grpo.drop_uniform_groups
        self.scale_rewards = reward_scaling(config.grpo)
        self.drop_truncated = config.grpo.drop_truncated
        env = config.env
        self.reward = functools.partial(
            REWARDS[env.reward],
            format_score=env.format_score,
            retrieval_score=env.retrieval_score,
            answer_score=env.answer_score,
            format_requires_search=env.format_requires_search,
            f1_score=env.f1_score,
        )

    # -- PolicyBackend -------------------------------------------------------------------------------------

    def rollout(self, requests: Sequence[RolloutRequest], group_size: int) -> list[list[Trajectory]]:
        repeated = [r for r in requests for _ in range(group_size)]
        samples = self.engine.generate([(r.instruction, r.question) for r in repeated], generator=self.generator)
        flat = self._trajectories([r.instruction_id for r in repeated], [r.question for r in repeated], samples)
        self._release()
        return [flat[i : i + group_size] for i in range(0, len(flat), group_size)]

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> UpdateResult:
        if self.drop_uniform_groups:
            groups = [group for group in groups if len({t.reward for t in group}) > 1]
            if not groups:
                return self.trainer.idle_step()
        advantages = scaled_advantages([[t.reward for t in group] for group in groups], self.scale_rewards)
        samples = [
            TrainSample(
                t.payload.prompt_ids,
                t.payload.response_ids,
                t.payload.response_mask,
                advantage,
                rollout_logprobs=t.payload.rollout_logprobs,
            )
            for group, group_adv in zip(groups, advantages, strict=True)
            for t, advantage in zip(group, group_adv, strict=True)
            if t.payload is not None and t.payload.response_ids and not (self.drop_truncated and t.payload.truncated)
        ]
        if not samples:  # DAPO's overlong filtering (`grpo.drop_truncated`) can leave nothing to train on
            return self.trainer.idle_step()
        self.engine.weights.release()  # the update changes the weights: the rollout copy is rebuilt after it
        result = self.trainer.update(samples)
        if self.drop_truncated:
            cut = [t for group in groups for t in group if t.payload is not None and t.payload.truncated]
            result.metrics["dropped_truncated"] = float(len(cut))
        self._release()
        return result

    def score(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        """The training reward of one greedy rollout per question (verification's measure)."""
        return [t.reward for t in self.answer(instruction, questions)]

    def evaluate(self, instruction: str, questions: Sequence[Question]) -> list[QuestionResult]:
        return [QuestionResult.of_trajectory(t) for t in self.answer(instruction, questions)]

    def save(self, directory: Path) -> None:
        """`policy/` is a plain Hugging Face directory (what users download), or with LoRA the adapters in peft's
        format (megabytes), plus at the last step `merged/`, the policy with its adapters merged; `training/` holds
        the optimizer, scheduler and sampling state that only resuming needs."""
        self.trainer.save(directory / POLICY_DIR, state_dir=directory / TRAINING_DIR)
        torch.save(self.generator.get_state(), directory / TRAINING_DIR / GENERATOR_FILE)
        peft = self.trainer.peft
        if peft is not None:
            name_the_base(directory / POLICY_DIR, self.model_name)
            if self.trainer.steps_done >= self.total_steps:
                save_merged(peft, self.base_path, self.tokenizer, directory / MERGED_DIR, dtype=self.precision.master)

    def load(self, directory: Path) -> None:
        if not (directory / TRAINING_DIR).is_dir():
            raise FileNotFoundError(
                f"{directory} keeps no optimizer state ({TRAINING_DIR}/): only the newest checkpoint of a run that "
                "can still resume has it (checkpoint.optimizer_state 'latest'); resume from that one"
            )
        self.trainer.load(directory / POLICY_DIR, state_dir=directory / TRAINING_DIR)
        self.generator.set_state(torch.load(directory / TRAINING_DIR / GENERATOR_FILE, weights_only=True))

    # -- evaluation ----------------------------------------------------------------------------------------

    def answer(self, instruction: str, questions: Sequence[Question]) -> list[Trajectory]:
        """One greedy rollout per question, in batches; the trajectory's reward is the run's training reward."""
        out: list[Trajectory] = []
        for start in range(0, len(questions), self.score_batch):
            chunk = questions[start : start + self.score_batch]
            samples = self.engine.generate([(instruction, q) for q in chunk], greedy=True)
            out += self._trajectories(["eval"] * len(chunk), chunk, samples)
        self._release()
        return out

    def _release(self) -> None:
        """After a stage, give the freed activations and caches back to the system (see `heap`)."""
        if self.on_cpu:
            heap.release()

    def _trajectories(
        self, instruction_ids: Sequence[str], questions: Sequence[Question], samples: Sequence[RolloutSample]
    ) -> list[Trajectory]:
        rewards = self.reward(
            [s.response_text for s in samples],
            golden_answers=[q.golden_answers for q in questions],
            answers=[s.answer for s in samples],
        )
        return [
            Trajectory(
                instruction_id=instruction_id,
                question=question,
                response=sample.response_text,
                reward=reward,
                answer=sample.answer,
                tool_calls=sample.tool_calls,
                response_tokens=sum(sample.response_mask),
                error=sample.error,
                payload=sample,
            )
            for instruction_id, question, sample, reward in zip(
                instruction_ids, questions, samples, rewards, strict=True
            )
        ]
