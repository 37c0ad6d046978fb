"""The maths of the GRPO objective on token tensors: group advantages, per-token log-probs, the policy losses
registered by name (`register_policy_loss`), their aggregation, the k3 KL penalty and the rollout correction; it
knows tensors and masks, never models' layouts, batching, the optimizer or rewards' meaning.

A loss is one function registered under its `grpo.loss` name (verl's `register_policy_loss`): it turns log-probs,
old log-probs and advantages into per-token terms, which `aggregate` reduces as `config.LOSS_AGGREGATION` says for
that name; `grpo_loss` adds the KL term and the statistics. docs/losses.md has the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch
from torch import nn

from ...config import LOSS_AGGREGATION, GRPOConfig, GRPOLoss, RewardScaling
from .logits import at_least_float32
from .samples import TrainSample

KL_LOG_RATIO_CLAMP = 20.0
KL_VALUE_CLAMP = 10.0


# -- advantages ------------------------------------------------------------------------------------------------


def group_advantages(rewards: Sequence[Sequence[float]], eps: float = 1e-6) -> list[list[float]]:
    """(r_i − mean) / (std + eps) within each group, with the unbiased (n − 1) std as verl's GRPO estimator computes
    it, so both backends normalise alike. An all-equal group (or a group of one) gets zeros, decided by equality:
    the mean of equal floats need not be that float, so their std can be tiny rather than zero.

    >>> [round(a, 4) for a in group_advantages([[1.0, 0.0, 1.0, 0.0]], eps=0.0)[0]]
    [0.866, -0.866, 0.866, -0.866]
    >>> group_advantages([[0.5, 0.5], [1.0], [3.094932485201144] * 3])
    [[0.0, 0.0], [0.0], [0.0, 0.0, 0.0]]
    """
    advantages = []
    for group in rewards:
        n = len(group)
        if n < 2 or min(group) == max(group):
            advantages.append([0.0] * n)
            continue
        mean = sum(group) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (n - 1))
        advantages.append([(r - mean) / (std + eps) for r in group])
    return advantages


def scaled_advantages(rewards: Sequence[Sequence[float]], scale: RewardScaling, eps: float = 1e-6) -> list[list[float]]:
    """r_i − mean(group), divided by the std of the group (`group_advantages`, GRPO and DAPO eq. 10), by the std of
    every reward in the batch (TRL's `scale_rewards='batch'`), or by nothing (Dr. GRPO, Sec. 3.1). An all-equal
    group (or a group of one) gets exact zeros in every case.

    >>> scaled_advantages([[1.0, 0.0], [0.5, 0.5]], "none")
    [[0.5, -0.5], [0.0, 0.0]]
    >>> [round(a, 4) for a in scaled_advantages([[1.0, 0.0], [1.0, 1.0]], "batch", eps=0.0)[0]]
    [1.0, -1.0]
    """
    if scale == "group":
        return group_advantages(rewards, eps)
    centred = [
        [0.0] * len(group)
        if len(group) < 2 or min(group) == max(group)
        else [r - sum(group) / len(group) for r in group]
        for group in rewards
    ]
    if scale == "none":
        return centred
    flat = [r for group in rewards for r in group]
    mean = sum(flat) / len(flat) if flat else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in flat) / (len(flat) - 1)) if len(flat) > 1 else 0.0
    return [[a / (std + eps) for a in group] for group in centred]


# -- per-token log-probs and the policy loss -------------------------------------------------------------------


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is non-zero (over `dim`, or everything); 0 where nothing is unmasked.

    Masked entries are selected away, not multiplied by zero, so a NaN or inf there never leaks into the result or
    its gradient.
    """
    keep = mask != 0
    total = torch.where(keep, values, torch.zeros_like(values))
    count = keep.to(values.dtype)
    if dim is None:
        return total.sum() / count.sum().clamp(min=1.0)
    return total.sum(dim) / count.sum(dim).clamp(min=1.0)


def logits_to_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log π(target | prefix) for each position: `logits` [B, T, V] scores the tokens `targets` [B, T]."""
    logprobs = torch.log_softmax(at_least_float32(logits), dim=-1)
    return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def logits_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position, [B, T, V] → [B, T]."""
    logits = at_least_float32(logits)
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def token_logprobs(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Log-probs of the actual next tokens: [B, L] ids → [B, L − 1], entry t scoring token t + 1."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return logits_to_logprobs(logits[:, :-1], input_ids[:, 1:])


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance KL(π_θ ‖ π_ref) estimate: exp(d) − d − 1 with d = ref − logp; always ≥ 0.

    The log-ratio is clamped to ±20 before the exponential and the result to ≤ 10, as verl's `low_var_kl`.
    """
    log_ratio = (ref_logprobs - logprobs).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-KL_VALUE_CLAMP, KL_VALUE_CLAMP)


def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each trajectory's unmasked tokens, then over trajectories (an all-masked one counts as 0)."""
    return masked_mean(values, mask, dim=-1).mean()


# -- loss variants (docs/losses.md) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LossOptions:
    """Which policy loss `grpo_loss` takes (a name of `POLICY_LOSSES`), beyond the clip ratio ε and the KL weight β that
    every variant has."""

    variant: GRPOLoss = "grpo"
    clip_ratio_high: float | None = None
    """ε_high of the upper clip 1 + ε_high; None: ε, a symmetric clip."""
    norm_tokens: int = 0
    """dr_grpo's constant divisor of each reply's token sum (required > 0 for dr_grpo)."""

    def __post_init__(self) -> None:
        if self.variant not in POLICY_LOSSES:
            raise ValueError(
                f"no policy loss is registered as {self.variant!r}; registered: {', '.join(POLICY_LOSSES)}"
            )
        if self.variant == "dr_grpo" and self.norm_tokens <= 0:
            raise ValueError("dr_grpo needs norm_tokens > 0 (config.loss_norm_tokens resolves it)")

    @classmethod
    def from_config(cls, config: GRPOConfig) -> LossOptions:
        """The options of `config`, whose `norm_tokens` must be resolved already (`config.loss_norm_tokens`)."""
        return cls(config.loss, config.clip_ratio_high, config.norm_tokens)


def token_ratios(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] importance ratios: each token's π_θ/π_old (GRPO eq. 3, DAPO eq. 9). Untrained positions (observations,
    padding) hold exactly 1 and pass no gradient."""
    trained = mask != 0
    return torch.exp(torch.where(trained, logprobs - old_logprobs, torch.zeros_like(logprobs)))


def sequence_ratios(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] importance ratios: reply i's s_i = exp(mean over its trained tokens of log π_θ/π_old) on every token of
    the reply (GSPO eq. 7). Untrained positions (observations, padding) hold exactly 1 and pass no gradient."""
    trained = mask != 0
    log_ratio = torch.where(trained, logprobs - old_logprobs, torch.zeros_like(logprobs))
    sequence = masked_mean(log_ratio, mask, dim=-1).unsqueeze(-1)
    return torch.exp(torch.where(trained, sequence.expand_as(log_ratio), torch.zeros_like(log_ratio)))


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, *, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss −min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A) for ratios [B, T] and advantages [B], and where
    the clip decided it (bool [B, T])."""
    advantage = advantages.to(ratio.dtype).unsqueeze(-1)
    unclipped = ratio * advantage
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantage
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def aggregate(values: torch.Tensor, mask: torch.Tensor, options: LossOptions) -> torch.Tensor:
    """Per-token terms [B, T] to the scalar the variant minimises (`config.LOSS_AGGREGATION`, verl's names):
    seq-mean-token-mean (grpo, gspo), token-mean over the batch (dapo) or each reply's token sum over the constant
    `norm_tokens`, then the mean over replies (dr_grpo). Masked positions are selected away."""
    mode = LOSS_AGGREGATION[options.variant]
    if mode == "token-mean":
        return masked_mean(values, mask)
    if mode == "seq-mean-token-sum-norm":
        kept = torch.where(mask != 0, values, torch.zeros_like(values))
        return (kept.sum(-1) / options.norm_tokens).mean()
    return seq_mean_token_mean(values, mask)


def pass_share(variant: GRPOLoss, part: Sequence[TrainSample], whole: Sequence[TrainSample]) -> float:
    """The weight of one forward pass's loss in its mini-batch's, so that the passes add up to one pass over the
    whole: its share of the replies, or of the trained tokens for a token-mean loss (dapo)."""
    if LOSS_AGGREGATION[variant] == "token-mean":
        total = sum(sum(s.response_mask) for s in whole)
        if total:
            return sum(sum(s.response_mask) for s in part) / total
    return len(part) / len(whole)


# -- the registered policy losses -------------------------------------------------------------------------------


PolicyTerms = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""What a policy loss gives `grpo_loss`: its per-token terms to minimise [B, T], the importance ratios [B, T] and
where the clip decided the term (bool [B, T]); `aggregate` reduces the terms as the loss's name says."""


class PolicyLoss(Protocol):
    """A policy loss's per-token terms from the current and old log-probs [B, T], the advantages [B] and the trained
    tokens' mask [B, T], clipped to [1 − clip_low, 1 + clip_high]."""

    def __call__(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        clip_low: float,
        clip_high: float,
    ) -> PolicyTerms: ...


POLICY_LOSSES: dict[str, PolicyLoss] = {}
"""Every policy loss by its `grpo.loss` name, filled by `register_policy_loss`. The names are `config.GRPOLoss`'s, and
`config.LOSS_AGGREGATION` says how each one's terms reduce (tests/engine/test_losses.py holds the three alike)."""

_Loss = TypeVar("_Loss", bound=PolicyLoss)


def register_policy_loss(name: str) -> Callable[[_Loss], _Loss]:
    """Register a policy loss under `name`, as verl's `register_policy_loss` does: the run config's `grpo.loss`
    picks it by that name. One function may serve several names that differ only in their aggregation."""

    def register(loss: _Loss) -> _Loss:
        if name in POLICY_LOSSES:
            raise ValueError(f"a policy loss is already registered as {name!r}")
        POLICY_LOSSES[name] = loss
        return loss

    return register


@register_policy_loss("grpo")
@register_policy_loss("dr_grpo")
@register_policy_loss("dapo")
def token_clipped_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> PolicyTerms:
    """The clipped surrogate of each token's own ratio (GRPO eq. 3, Dr. GRPO, DAPO eq. 8–9): the three differ only in
    how the terms reduce (`aggregate`) and, for DAPO, in a wider upper clip."""
    ratio = token_ratios(logprobs, old_logprobs, mask)
    terms, clipped = clipped_surrogate(ratio, advantages, clip_low=clip_low, clip_high=clip_high)
    return terms, ratio, clipped


@register_policy_loss("gspo")
def sequence_clipped_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> PolicyTerms:
    """The clipped surrogate of each reply's length-normalised ratio on every token of the reply (GSPO eq. 5–7), so
    a whole reply is clipped or not."""
    ratio = sequence_ratios(logprobs, old_logprobs, mask)
    terms, clipped = clipped_surrogate(ratio, advantages, clip_low=clip_low, clip_high=clip_high)
    return terms, ratio, clipped


DEFAULT_LOSS = LossOptions()
"""grpo with a symmetric clip: what `grpo_loss` and the trainer's loss functions take unless told otherwise."""


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio: float,
    kl_coef: float,
    options: LossOptions = DEFAULT_LOSS,
    rollout_logprobs: torch.Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss to minimise and its statistics; tensors are [B, T] except `advantages` [B].

    With `rollout_logprobs` (log π of the tokens under the weights that sampled them) the statistics include the
    rollout mismatch (`rollout_mismatch`); with `tis_cap` too, each token's policy-gradient term is weighted by
    `tis_weights` (the KL term is not).

    loss = −(clipped surrogate) + β·k3-KL, each per token, aggregated over `mask` as `options.variant` says
    (`aggregate`; the default, grpo, is sequence-mean-token-mean). Masked positions are selected away before any
    arithmetic, so they get exactly zero gradient. `ref_logprobs=None` (no reference pass: the loss has no KL term,
    `kl_coef` 0) takes the current log-probs, detached, as the reference: the KL term and its statistic are 0.
    """
    trained = mask != 0
    if ref_logprobs is None:
        if kl_coef:
            raise ValueError("a KL penalty needs the reference log-probs")
        ref_logprobs = logprobs.detach()
    clip_high = clip_ratio if options.clip_ratio_high is None else options.clip_ratio_high
    pg_tokens, ratio, clip_bit = POLICY_LOSSES[options.variant](
        logprobs, old_logprobs, advantages, mask, clip_low=clip_ratio, clip_high=clip_high
    )
    if rollout_logprobs is not None and tis_cap is not None:
        pg_tokens = pg_tokens * tis_weights(old_logprobs, rollout_logprobs, mask, cap=tis_cap)
    kl = k3_kl(logprobs, torch.where(trained, ref_logprobs, logprobs))
    pg_loss = aggregate(pg_tokens, mask, options)
    kl_loss = aggregate(kl, mask, options)
    loss = pg_loss + kl_coef * kl_loss
    stats = {
        "pg_loss": pg_loss.item(),
        "kl": kl_loss.item(),
        "clip_fraction": masked_mean(clip_bit.to(logprobs.dtype), mask).item(),
        "ratio_mean": masked_mean(ratio, mask).item(),
    }
    if rollout_logprobs is not None:
        stats |= rollout_mismatch(old_logprobs, rollout_logprobs, mask, clip_ratio=clip_ratio)
    return loss, stats


# -- rollout correction ----------------------------------------------------------------------------------------


def tis_weights(
    old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor, *, cap: float
) -> torch.Tensor:
    """Truncated importance sampling weights [B, T]: min(π_old / π_rollout, cap) = min(exp(old − rollout), cap) per
    token, detached (a constant factor of the policy-gradient loss); 1 where `mask` is 0.

    The definition of verl (`verl/trainer/ppo/mismatch_helper.py`, `compute_rollout_importance_weights` with
    rollout_is_level 'token' and rollout_is_mode 'truncate': exp(old_log_prob − rollout_log_prob) clamped above at
    `rollout_is_threshold`, which multiplies the per-token policy loss) and of TRL (`trl/trainer/grpo_trainer.py`:
    importance_sampling_ratio = clamp(exp(old_per_token_logps − sampling_per_token_logps),
    max=vllm_importance_sampling_cap), default cap 2.0, multiplied into the per-token loss before the KL term).

    >>> tis_weights(torch.tensor([[0.0, -1.0, 0.5]]), torch.tensor([[0.0, 0.0, 0.0]]), torch.ones(1, 3), cap=1.5)
    tensor([[1.0000, 0.3679, 1.5000]])
    """
    log_ratio = torch.where(mask != 0, old_logprobs - rollout_logprobs, torch.zeros_like(old_logprobs))
    return torch.exp(log_ratio.detach()).clamp(max=cap)


def rollout_mismatch(
    old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor, *, clip_ratio: float
) -> dict[str, float]:
    """verl's measures of how far the rollout's sampling distribution is from the policy the update scores with,
    over the trained tokens: mean |log π_old − log π_rollout| (`rollout_logp_abs_diff`), the k3 estimate of
    KL(π_rollout ‖ π_old), mean of exp(d) − d − 1 with d = old − rollout (`rollout_kl`, verl's mismatch_k3_kl),
    and the share of tokens whose ratio π_old / π_rollout lies outside the clip range [1 − ε, 1 + ε]
    (`rollout_ratio_outside_clip`)."""
    with torch.no_grad():
        gap = torch.where(mask != 0, old_logprobs - rollout_logprobs, torch.zeros_like(old_logprobs))
        ratio = torch.exp(gap)
        outside = (ratio < 1.0 - clip_ratio) | (ratio > 1.0 + clip_ratio)
        return {
            "rollout_logp_abs_diff": masked_mean(gap.abs(), mask).item(),
            "rollout_kl": masked_mean(torch.expm1(gap) - gap, mask).item(),
            "rollout_ratio_outside_clip": masked_mean(outside.to(gap.dtype), mask).item(),
        }
