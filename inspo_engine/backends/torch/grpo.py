"""The GRPO update of INSPO.md on one torch model: samples batched into forward passes, each pass's loss, the
learning-rate schedule and the trainer; the loss maths is `losses.py`'s. It knows token ids and masks, never prompts,
instructions, rollouts or rewards' meaning.

Reading order: batching → the loss of a forward pass → learning-rate schedule → the trainer, whose `update` runs the
four sections of one training step top to bottom.

Log-probs are taken three ways (`TrainPath`), all giving the same numbers: `full` runs the whole model on one padded
row per sample and a log-softmax over every position (the textbook computation, kept as the reference);
`selective` runs the model's decoder on the same rows and the output head only where a trained token is predicted
(`logits.py`); `shared_prefix`, the default, does that on one row per group with the prompt read once (`prefix.py`).
Old and reference log-probs are stored as rows holding each sample's trained tokens only.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from ...config import GRPOConfig
from ...policy import UpdateResult
from .adapters import wrap_lora
from .logits import (
    CausalLMParts,
    head_gradient_into_grad,
    layer_checkpointing,
    split_causal_lm,
    target_logprobs,
)
from .losses import (
    DEFAULT_LOSS,
    LossOptions,
    grpo_loss,
    logits_entropy,
    logits_to_logprobs,
    masked_mean,
    pass_share,
    token_logprobs,
)
from .precision import compute_region
from .prefix import Layout, check_sample, grouped_attention, padded_layout, shared_prefix_layout, takes_packed_mask
from .samples import TrainSample

if TYPE_CHECKING:  # peft is imported only when LoRA is on: it adds seconds to every import of the backend
    from peft import PeftModel

SCHEMA_VERSION = 1
"""Version of `trainer_state.pt`; loading refuses newer ones."""
TRAINER_STATE_FILE = "trainer_state.pt"
LORA_ADAPTER_FILE = "adapter_model.safetensors"

FORWARD_TOKENS = 1024
"""Default most tokens of one training forward/backward pass (`GRPOTrainer.forward_tokens`)."""

TrainPath = Literal["full", "selective", "shared_prefix"]
"""How log-probs are computed; see the module docstring. All three agree to float32 rounding."""

_T = TypeVar("_T")


# -- batching --------------------------------------------------------------------------------------------------


@dataclass
class TokenBatch:
    """Samples packed as right-padded tensors. Position t of `loss_mask` belongs to the *target* token t + 1:
    1 only where that token is one of the model's own response tokens (never a prompt, observation or pad)."""

    input_ids: torch.Tensor
    """[B, L] prompt + response ids, right-padded."""
    attention_mask: torch.Tensor
    """[B, L] 1 on real tokens."""
    loss_mask: torch.Tensor
    """[B, L − 1] float, aligned with `token_logprobs`."""
    advantages: torch.Tensor
    """[B] float."""

    @property
    def rows(self) -> list[int]:
        """Number of log-prob positions of each sample (its length − 1)."""
        return [int(n) - 1 for n in self.attention_mask.sum(-1).tolist()]


def collate(samples: Sequence[TrainSample], *, pad_id: int, device: torch.device) -> TokenBatch:
    """Pack samples into a right-padded `TokenBatch` on `device`."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    width = max(lengths)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    loss_mask = torch.zeros((len(samples), width - 1), dtype=torch.float32)
    for row, sample in enumerate(samples):
        check_sample(sample)
        start = len(sample.prompt_ids) - 1  # the log-prob position that scores the first response token
        input_ids[row, : lengths[row]] = torch.tensor(sample.prompt_ids + sample.response_ids, dtype=torch.long)
        attention_mask[row, : lengths[row]] = 1
        loss_mask[row, start : start + len(sample.response_mask)] = torch.tensor(sample.response_mask)
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return TokenBatch(input_ids.to(device), attention_mask.to(device), loss_mask.to(device), advantages.to(device))


def pad_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors into [len(rows), width], zero-padded on the right."""
    out = rows[0].new_zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def row_mask(counts: Sequence[int], *, device: torch.device) -> torch.Tensor:
    """[len(counts), max(counts)] bool, True on the first counts[i] entries of row i: where `pad_rows` put values."""
    width = max(counts, default=0)
    return torch.arange(width, device=device)[None, :] < torch.tensor(list(counts), device=device)[:, None]


def spread_rows(rows: Sequence[torch.Tensor], loss_mask: torch.Tensor) -> torch.Tensor:
    """Trained-token rows back at their places in a padded batch: [B, L − 1], 0 wherever `loss_mask` is 0."""
    keep = loss_mask != 0
    return torch.zeros(keep.shape, dtype=rows[0].dtype, device=keep.device).masked_scatter(keep, torch.cat(list(rows)))


def rollout_rows(samples: Sequence[TrainSample], *, device: torch.device) -> list[torch.Tensor] | None:
    """Each sample's rollout log-probs of its trained tokens (as `logprob_rows` orders them), or None unless every
    sample carries them."""
    if any(s.rollout_logprobs is None for s in samples):
        return None
    rows = [[lp for lp, m in zip(s.rollout_logprobs or [], s.response_mask, strict=True) if m] for s in samples]
    return [torch.tensor(row, dtype=torch.float32, device=device) for row in rows]


def prompt_groups(samples: Sequence[TrainSample]) -> list[list[int]]:
    """Indices of the samples that share a prompt (a question's G rollouts), groups in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, sample in enumerate(samples):
        groups.setdefault(tuple(sample.prompt_ids), []).append(i)
    return list(groups.values())


def forward_passes(
    samples: Sequence[TrainSample], micro_size: int, *, budget: int | None, shared: bool
) -> Iterator[list[int]]:
    """Sample indices of each forward pass: micro-batches of `micro_size` consecutive samples, each cut into runs
    of consecutive same-prompt groups holding at most `budget` tokens (a prompt counts once per group when
    `shared`). A group over budget is cut into parts of consecutive rollouts that each fit with their prompt (the
    prompt is then read once per part; a single rollout over budget runs alone). `budget` None: whole
    micro-batches. Passes list samples in order, so their results concatenate back into sample order."""
    for micro in _chunks(range(len(samples)), micro_size):
        if budget is None:
            yield micro
            continue
        current: list[int] = []
        used = 0
        for group in _consecutive_groups(samples, micro):
            for part in _group_parts(samples, group, budget, shared=shared):
                tokens = _pass_tokens(samples, part, shared=shared)
                if current and used + tokens > budget:
                    yield current
                    current, used = [], 0
                current += part
                used += tokens
        yield current


def _pass_tokens(samples: Sequence[TrainSample], group: list[int], *, shared: bool) -> int:
    """Tokens that the rollouts `group` (one prompt) occupy in a pass."""
    responses = sum(len(samples[i].response_ids) for i in group)
    return responses + len(samples[group[0]].prompt_ids) * (1 if shared else len(group))


def _group_parts(samples: Sequence[TrainSample], group: list[int], budget: int, *, shared: bool) -> list[list[int]]:
    """`group` whole if it fits `budget`, else cut into runs of consecutive rollouts that each fit with the prompt."""
    if _pass_tokens(samples, group, shared=shared) <= budget:
        return [group]
    parts: list[list[int]] = [[]]
    for i in group:
        if parts[-1] and _pass_tokens(samples, [*parts[-1], i], shared=shared) > budget:
            parts.append([])
        parts[-1].append(i)
    return parts


def _consecutive_groups(samples: Sequence[TrainSample], indices: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in indices:
        if groups and samples[groups[-1][-1]].prompt_ids == samples[i].prompt_ids:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _chunks(items: Sequence[_T], size: int) -> Iterator[list[_T]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def policy_loss(
    model: nn.Module,
    batch: TokenBatch,
    old_logprobs: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
    *,
    clip_ratio: float,
    kl_coef: float,
    options: LossOptions = DEFAULT_LOSS,
    rollout_logprobs: torch.Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Forward `model` on a batch and return the GRPO loss (with gradient) and its statistics, entropy included.

    `old_logprobs=None` means the policy has not moved since the rollout (the step's only mini-batch): the old
    log-probs are the current ones, detached, and the ratio is exactly 1.
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits[:, :-1]
    logprobs = logits_to_logprobs(logits, batch.input_ids[:, 1:])
    if old_logprobs is None:
        old_logprobs = logprobs.detach()
    loss, stats = grpo_loss(
        logprobs,
        old_logprobs,
        ref_logprobs,
        batch.advantages,
        batch.loss_mask,
        clip_ratio=clip_ratio,
        kl_coef=kl_coef,
        options=options,
        rollout_logprobs=rollout_logprobs,
        tis_cap=tis_cap,
    )
    with torch.no_grad():
        stats["entropy"] = masked_mean(logits_entropy(logits.detach()), batch.loss_mask).item()
    return loss, stats


def layout_logprobs(parts: CausalLMParts, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π, entropy) of every trained token of `layout`, flat [N] in its order: the decoder runs on the layout's
    rows, the output head only on the N hidden states that predict a trained token."""
    if not layout.packed:
        return _head_logprobs(parts, layout)
    with grouped_attention(parts.lm) as switched:
        if not switched:
            raise NotImplementedError(f"{type(parts.lm).__name__} cannot take the shared-prefix layout's 4-D mask")
        return _head_logprobs(parts, layout)


def _head_logprobs(parts: CausalLMParts, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    out = parts.decoder(**layout.model_inputs(), use_cache=False)
    hidden: torch.Tensor = out.last_hidden_state
    return target_logprobs(parts.head, hidden[layout.row, layout.col], layout.targets)


def selective_policy_loss(
    parts: CausalLMParts,
    layout: Layout,
    advantages: torch.Tensor,
    old_rows: Sequence[torch.Tensor] | None,
    ref_rows: Sequence[torch.Tensor] | None,
    *,
    clip_ratio: float,
    kl_coef: float,
    options: LossOptions = DEFAULT_LOSS,
    rollout_rows: Sequence[torch.Tensor] | None = None,
    tis_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """`policy_loss` computed on a `Layout`, with old, reference and rollout log-probs as trained-token rows.

    Each sample's trained tokens become one left-aligned row of a [B, T] tensor, so `grpo_loss` aggregates exactly
    as over the padded batch (sequence-mean-token-mean over the trained tokens).
    """
    logprobs, entropy = layout_logprobs(parts, layout)
    mask = row_mask(layout.counts, device=logprobs.device)
    current = torch.zeros(mask.shape, dtype=logprobs.dtype, device=logprobs.device).masked_scatter(mask, logprobs)
    width = mask.shape[1]
    old = current.detach() if old_rows is None else pad_rows(old_rows, width)
    loss, stats = grpo_loss(
        current,
        old,
        None if ref_rows is None else pad_rows(ref_rows, width),
        advantages,
        mask.float(),
        clip_ratio=clip_ratio,
        kl_coef=kl_coef,
        options=options,
        rollout_logprobs=None if rollout_rows is None else pad_rows(rollout_rows, width),
        tis_cap=tis_cap,
    )
    stats["entropy"] = entropy.mean().item() if entropy.numel() else 0.0
    return loss, stats


# -- learning-rate schedule ------------------------------------------------------------------------------------


def lr_factor(step: int, *, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak lr for the update that follows `step` completed updates.

    Linear warm-up reaching the peak on update `warmup_steps`, then a cosine that would reach 0 one update after the
    last (so no update is wasted at lr 0); 0 beyond `total_steps`.
    """
    if step >= total_steps:
        return 0.0
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step + 1 - warmup_steps) / (total_steps - warmup_steps + 1)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_with_warmup(
    optimizer: torch.optim.Optimizer, *, total_steps: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of INSPO.md: warm-up over int(warmup_ratio · total_steps) updates, then cosine decay to 0."""
    factor = functools.partial(lr_factor, total_steps=total_steps, warmup_steps=int(warmup_ratio * total_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# -- the trainer -----------------------------------------------------------------------------------------------


def _frozen(model: nn.Module) -> nn.Module:
    model.eval()
    model.requires_grad_(False)
    return model


def reference_copy(model: nn.Module, storage: torch.dtype | None = None) -> nn.Module:
    """A frozen copy of `model` to serve as the reference policy. With a `storage` dtype (bfloat16), the weights of
    its linear and embedding layers — all but a few thousand of its parameters — are kept in that dtype and widened
    to the policy's dtype at each use: the forward computes in float32 on weights rounded to bfloat16, for half the
    memory. Ties between weights (SmolLM2's embedding and output head) are kept; the policy is not touched."""
    if storage is None:
        return _frozen(copy.deepcopy(model))
    layers = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Embedding)]
    narrowed = {id(m.weight) for m in layers}
    with torch.no_grad():
        # the memo hands deepcopy the converted parameters, so the float32 weights are never duplicated
        memo: dict[int, Any] = {
            id(p): nn.Parameter(p.to(storage) if id(p) in narrowed else p.clone(), requires_grad=False)
            for p in model.parameters()
        }
        ref = copy.deepcopy(model, memo)
    compute = next(p.dtype for p in model.parameters() if p.is_floating_point())
    for parent in list(ref.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear | nn.Embedding):
                setattr(parent, name, _Widened(child, compute))
    return _frozen(ref)


class _Widened(nn.Module):
    """A linear or embedding layer whose weight is stored narrow (bfloat16) and computed with in `compute` dtype:
    a linear layer widens its weight for the product, an embedding widens only the rows it looks up."""

    def __init__(self, layer: nn.Linear | nn.Embedding, compute: torch.dtype) -> None:
        super().__init__()
        self.weight = layer.weight
        self.bias = layer.bias if isinstance(layer, nn.Linear) else None
        self.lookup = isinstance(layer, nn.Embedding)
        self.padding_idx = layer.padding_idx if isinstance(layer, nn.Embedding) else None
        self.compute = compute

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.lookup:
            return nn.functional.embedding(inputs, self.weight, self.padding_idx).to(self.compute)
        if torch.is_autocast_enabled(inputs.device.type):  # mixed precision: the product reads the narrow weight
            return nn.functional.linear(inputs, self.weight, self.bias)
        bias = self.bias.to(self.compute) if self.bias is not None else None
        return nn.functional.linear(inputs, self.weight.to(self.compute), bias)


class GRPOTrainer:
    """Applies GRPO updates to a policy and keeps what an exact resume needs (optimizer, schedule, shuffling rng).

    Batch sizes in `GRPOConfig` count questions; each question has `group_size` rollouts, so a mini-batch holds
    mini_batch_size × group_size samples and a micro-batch micro_batch_size × group_size.

    The reference policy is frozen. Full fine-tuning: `ref_model` if given, else a deep copy of `model` taken here
    (so build the trainer from the *initial* weights, then `load` a checkpoint). LoRA (`config.use_lora`): `model`
    is wrapped in place by peft and only the adapters train; the reference is the same network with its adapters
    disabled — the initial policy, because LoRA starts as a no-op — so no copy is made (an explicit `ref_model`
    still wins). `reference_storage` (bfloat16) keeps the copy's linear and embedding weights in that dtype, computed
    with in float32 (`reference_copy`): half its memory, for a reference rounded to bfloat16. Dropout stays off (eval
    mode) throughout, so the first mini-batch's ratio is exactly the recomputed one.

    `path` picks how log-probs are computed (see `TrainPath`); `shared_prefix` falls back to `selective` for a model
    that cannot switch to the grouped attention its 4-D mask needs. `self.path` is the one in use. With
    `checkpoint_layers` the decoder's blocks recompute their activations during backward instead of keeping them:
    about a third more update time for a fraction of the memory. `forward_tokens` splits each micro-batch further
    into forward/backward passes of whole groups holding at most that many tokens (a larger group runs alone; None:
    one pass per micro-batch): the loss and gradient are unchanged, the token-mean statistics (clip fraction, ratio,
    entropy) are averaged per pass by sample share. Both bound the memory of a pass — and the heap fragmentation
    that freed activations leave behind, which is what kept the cpu-demo above 4 GB of RSS.

    `compute_dtype` (bfloat16; `backend.precision` 'bf16-mixed', see `precision.py`) runs the forward passes of the
    update and of the old and reference log-probs under autocast in that dtype, while the weights, their gradients
    and AdamW's moments stay as loaded (float32), and log-softmax, loss and statistics are float32.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: GRPOConfig,
        *,
        device: torch.device,
        ref_model: nn.Module | None = None,
        seed: int = 0,
        path: TrainPath = "shared_prefix",
        checkpoint_layers: bool = True,
        forward_tokens: int | None = FORWARD_TOKENS,
        reference_storage: torch.dtype | None = None,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if not isinstance(pad_id, int):
            raise ValueError("the tokenizer has neither a pad token nor an eos token")
        self.pad_id: int = pad_id
        self.peft: PeftModel | None = wrap_lora(model, config, frozen_dtype=compute_dtype) if config.use_lora else None
        self.policy: nn.Module = self.peft if self.peft is not None else model
        self.policy.eval()
        self.parts = split_causal_lm(self.policy)
        shared = path == "shared_prefix" and takes_packed_mask(self.parts.lm)
        self.path: TrainPath = "selective" if path == "shared_prefix" and not shared else path
        self.checkpoint_layers = checkpoint_layers
        self.forward_tokens = forward_tokens
        self.compute_dtype = compute_dtype
        if ref_model is not None:
            self.ref_model: nn.Module | None = _frozen(ref_model)
        else:
            self.ref_model = None if self.peft is not None else reference_copy(model, reference_storage)
        self.trainable = [p for p in self.policy.parameters() if p.requires_grad]
        if not self.trainable:
            raise ValueError("the policy has no parameter that requires grad; nothing would train")
        # fused: one kernel per parameter updates it and both moments in place; the default CPU path made temporaries
        # the size of each parameter (113 MB for SmolLM2's embedding), where a cpu-demo probe had its peak
        self.optimizer = torch.optim.AdamW(self.trainable, lr=config.lr, fused=True)
        self.scheduler = cosine_with_warmup(
            self.optimizer, total_steps=config.total_steps, warmup_ratio=config.warmup_ratio
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.steps_done = 0

    @property
    def model(self) -> nn.Module:
        """The policy being trained, for generating rollouts (in LoRA mode the peft wrapper, adapters active)."""
        return self.policy

    # -- one training step -------------------------------------------------------------------------------------

    def update(self, samples: Sequence[TrainSample]) -> UpdateResult:
        """One GRPO training step on all `samples` (every group's rollouts, advantages already filled in)."""
        if not samples:
            raise ValueError("update needs at least one sample")
        samples = list(samples)

        # 1) Old log-probs: the current policy, recomputed once (so the first mini-batch starts at ratio 1). With a
        #    single mini-batch the policy has not moved when the loss is taken, so they come from that forward pass.
        started = perf_counter()
        minibatches = self.minibatches(samples)
        old_rows = None if len(minibatches) == 1 else self.logprob_rows(self.policy, samples)
        old_done = perf_counter()

        # 2) Reference log-probs for the KL penalty; a loss without one (kl_coef 0, as DAPO and Dr. GRPO are run)
        #    needs no reference forward at all.
        ref_rows = self.reference_logprob_rows(samples) if self.config.kl_coef else None
        ref_done = perf_counter()

        # 3) Shuffled mini-batches, gradient accumulated over micro-batches, one optimizer step each.
        lr = float(self.optimizer.param_groups[0]["lr"])
        metrics = self._optimise(samples, minibatches, old_rows, ref_rows)

        # 4) Schedule and bookkeeping.
        self.scheduler.step()
        self.steps_done += 1
        metrics |= {
            "lr": lr,
            "response_tokens": float(sum(len(s.response_ids) for s in samples)),
            "trained_tokens": float(sum(sum(s.response_mask) for s in samples)),
        }
        timings = {"old_logprobs": old_done - started, "ref_logprobs": ref_done - old_done}
        timings["update"] = perf_counter() - ref_done
        metrics["ref_skipped"] = float(ref_rows is None)
        return UpdateResult(metrics=metrics, timings=timings)

    def idle_step(self) -> UpdateResult:
        """A training step with nothing to learn from: the schedule advances, the weights stay."""
        lr = float(self.optimizer.param_groups[0]["lr"])
        with warnings.catch_warnings():  # the schedule counts steps, not optimizer updates: no update is intended
            warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)`", UserWarning)
            self.scheduler.step()
        self.steps_done += 1
        return UpdateResult(metrics={"lr": lr, "optimizer_steps": 0.0, "trained_tokens": 0.0}, timings={})

    def minibatches(self, samples: Sequence[TrainSample]) -> list[list[int]]:
        """Sample indices of each mini-batch: whole groups (samples sharing a prompt) in shuffled order,
        `mini_batch_size` groups each, so a group's rollouts always train together."""
        groups = prompt_groups(samples)
        order = torch.randperm(len(groups), generator=self.generator).tolist()
        chunks = _chunks([groups[g] for g in order], self.config.mini_batch_size)
        return [[i for group in chunk for i in group] for chunk in chunks]

    def _optimise(
        self,
        samples: list[TrainSample],
        minibatches: list[list[int]],
        old_rows: list[torch.Tensor] | None,
        ref_rows: list[torch.Tensor] | None,
    ) -> dict[str, float]:
        micro_size = self.batch_sizes()[1]
        totals: dict[str, float] = {}
        steps = skipped = 0
        for indices in minibatches:
            stats = self.accumulate(
                [samples[i] for i in indices],
                None if old_rows is None else [old_rows[i] for i in indices],
                None if ref_rows is None else [ref_rows[i] for i in indices],
                micro_size=micro_size,
            )
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, self.config.max_grad_norm))
            if math.isfinite(grad_norm):
                self.optimizer.step()
                # the fused kernel writes the weights without bumping their version counters, which tell a rollout
                # copy of the weights (`rollout_weights.RolloutWeights`) that they changed
                torch.autograd.graph.increment_version(self.trainable)
            else:
                skipped += 1  # a non-finite gradient would poison the weights and Adam's moments
            self.optimizer.zero_grad(set_to_none=True)
            stats["grad_norm"] = grad_norm
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value * len(indices) / len(samples)
            steps += 1
        return totals | {"optimizer_steps": float(steps), "skipped_steps": float(skipped)}

    def batch_sizes(self) -> tuple[int, int]:
        """(mini-batch, micro-batch) sizes in samples: the config's question counts × group_size."""
        group = self.config.group_size
        return self.config.mini_batch_size * group, self.config.micro_batch_size * group

    def accumulate(
        self,
        samples: Sequence[TrainSample],
        old_rows: Sequence[torch.Tensor] | None,
        ref_rows: Sequence[torch.Tensor] | None,
        *,
        micro_size: int,
    ) -> dict[str, float]:
        """Zero the gradients, then leave in `.grad` the gradient of the GRPO loss over all `samples`, computed in
        micro-batches of `micro_size` samples (split further by `forward_tokens`). Each pass's loss (a mean over its
        trajectories) is weighted by its share of the trajectories, so the result equals one pass over the whole
        batch. Returns mean statistics.
        """
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        shared = self.path == "shared_prefix"
        with self._loss_passes():
            for indices in forward_passes(samples, micro_size, budget=self.forward_tokens, shared=shared):
                with compute_region(self.device, self.compute_dtype):  # forward only; backward follows its dtypes
                    loss, stats = self._micro_loss(
                        [samples[i] for i in indices],
                        None if old_rows is None else [old_rows[i] for i in indices],
                        None if ref_rows is None else [ref_rows[i] for i in indices],
                    )
                share = pass_share(self.config.loss, [samples[i] for i in indices], samples)
                torch.autograd.backward(loss * share)
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value * share
        return totals

    @contextlib.contextmanager
    def _loss_passes(self) -> Iterator[None]:
        """The settings that must hold through forward *and* backward, since checkpointed blocks rerun in backward:
        the grouped attention (shared-prefix path) and layer checkpointing (when on); and the head's weight gradient
        added straight into `.grad` (`accumulate` runs `backward()`)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(head_gradient_into_grad())
            if self.path == "shared_prefix":
                stack.enter_context(grouped_attention(self.parts.lm))
            if self.checkpoint_layers:
                stack.enter_context(layer_checkpointing(self.parts.decoder))
            yield

    def _micro_loss(
        self, samples: list[TrainSample], old_rows: list[torch.Tensor] | None, ref_rows: list[torch.Tensor] | None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The GRPO loss of one micro-batch (with gradient) along `self.path`."""
        clip_ratio, kl_coef = self.config.clip_ratio, self.config.kl_coef
        options = LossOptions.from_config(self.config)
        rollout = rollout_rows(samples, device=self.device)
        cap = self.config.tis_cap if self.config.rollout_correction == "tis" else None
        if self.path == "full":
            batch = collate(samples, pad_id=self.pad_id, device=self.device)
            old = None if old_rows is None else spread_rows(old_rows, batch.loss_mask)
            ref = None if ref_rows is None else spread_rows(ref_rows, batch.loss_mask)
            sampled = None if rollout is None else spread_rows(rollout, batch.loss_mask)
            return policy_loss(
                self.policy,
                batch,
                old,
                ref,
                clip_ratio=clip_ratio,
                kl_coef=kl_coef,
                options=options,
                rollout_logprobs=sampled,
                tis_cap=cap,
            )
        advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=self.device)
        layout = self.layout(samples)
        return selective_policy_loss(
            self.parts,
            layout,
            advantages,
            old_rows,
            ref_rows,
            clip_ratio=clip_ratio,
            kl_coef=kl_coef,
            options=options,
            rollout_rows=rollout,
            tis_cap=cap,
        )

    def layout(self, samples: Sequence[TrainSample]) -> Layout:
        """`samples` laid out for `self.path` (`selective`: one padded row each; `shared_prefix`: one per group)."""
        make = shared_prefix_layout if self.path == "shared_prefix" else padded_layout
        return make(samples, pad_id=self.pad_id, device=self.device)

    @torch.no_grad()
    def logprob_rows(self, model: nn.Module, samples: Sequence[TrainSample]) -> list[torch.Tensor]:
        """Per-sample log-probs under `model` (no gradient) of the sample's trained tokens (response_mask 1), in
        order, computed in micro-batches along `self.path`."""
        rows: list[torch.Tensor] = []
        shared = self.path == "shared_prefix"
        micro_size = self.batch_sizes()[1]
        for indices in forward_passes(samples, micro_size, budget=self.forward_tokens, shared=shared):
            chunk = [samples[i] for i in indices]
            with compute_region(self.device, self.compute_dtype):
                if self.path == "full":
                    batch = collate(chunk, pad_id=self.pad_id, device=self.device)
                    logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask)
                    rows += [logprobs[i][batch.loss_mask[i] != 0] for i in range(len(chunk))]
                else:
                    layout = self.layout(chunk)
                    flat, _ = layout_logprobs(split_causal_lm(model), layout)
                    rows += list(torch.split(flat, layout.counts))
        return rows

    def reference_logprob_rows(self, samples: Sequence[TrainSample]) -> list[torch.Tensor]:
        """`logprob_rows` under the frozen reference (in LoRA mode: the policy with its adapters disabled)."""
        if self.ref_model is not None:
            return self.logprob_rows(self.ref_model, samples)
        assert self.peft is not None
        with self.peft.disable_adapter():
            return self.logprob_rows(self.peft, samples)

    # -- state and checkpoints ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything besides the weights that an exact resume needs."""
        return {
            "schema_version": SCHEMA_VERSION,
            "use_lora": self.peft is not None,
            "steps_done": self.steps_done,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version = state.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"unsupported trainer state version {version!r} (this code reads ≤ {SCHEMA_VERSION})")
        if bool(state["use_lora"]) != (self.peft is not None):
            saved, here = bool(state["use_lora"]), self.peft is not None
            raise ValueError(f"trainer state was saved with use_lora={saved}; this trainer has use_lora={here}")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.steps_done = int(state["steps_done"])

    def save(self, directory: Path, *, state_dir: Path | None = None) -> None:
        """The policy as a Hugging Face directory (safetensors; LoRA: peft's adapter files), its tokenizer, and
        `trainer_state.pt` (optimizer, scheduler, generator) in `state_dir` (default: the same directory)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state_dir = Path(state_dir) if state_dir is not None else directory
        state_dir.mkdir(parents=True, exist_ok=True)
        if self.peft is not None:
            self.peft.save_pretrained(str(directory))
        else:
            assert isinstance(self.policy, PreTrainedModel)
            self.policy.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        partial = state_dir / f".{TRAINER_STATE_FILE}.partial"
        torch.save(self.state_dict(), partial)
        os.replace(partial, state_dir / TRAINER_STATE_FILE)

    def load(self, directory: Path, *, state_dir: Path | None = None) -> None:
        """Restore what `save` wrote into this trainer (built from the same initial model and config)."""
        directory = Path(directory)
        state_dir = Path(state_dir) if state_dir is not None else directory
        if self.peft is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.peft, load_file(directory / LORA_ADAPTER_FILE, device=str(self.device)))
        else:
            dtype = next(self.policy.parameters()).dtype
            saved = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
            self.policy.load_state_dict(saved.state_dict(), strict=True)
            del saved
        state = torch.load(state_dir / TRAINER_STATE_FILE, map_location="cpu", weights_only=True)
        self.load_state_dict(state)
