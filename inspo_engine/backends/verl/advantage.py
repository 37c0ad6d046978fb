"""The GRPO advantage of a verl run, registered with verl as `inspo_grpo`: the torch backend's `group_advantages`
applied to verl's batch, so both backends normalise alike and an all-equal group gets exact zeros.

verl's own `grpo` estimator divides by a float32 std that a group of equal rewards need not make zero (seven
rewards of 8.194925… give advantages of 0.47 each); this one decides such a group by equality. It knows nothing of
the population or the trainer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from ..torch.losses import group_advantages
from .overrides import ADVANTAGE_ESTIMATOR


@register_adv_est(ADVANTAGE_ESTIMATOR)
def grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (batch, response length): each row's outcome reward normalised within the rows
    that share its `uid` (the group of one prompt), spread over its response tokens. verl's
    `algorithm.norm_adv_by_std_in_grpo` false leaves out the division by the std."""
    by_std = config is None or bool(config.get("norm_adv_by_std_in_grpo", True))
    scores = token_level_rewards.sum(dim=-1)
    rows: dict[Any, list[int]] = defaultdict(list)
    for row, uid in enumerate(index):
        rows[uid].append(row)
    advantages = torch.zeros_like(scores)
    for group in rows.values():
        rewards = [float(scores[row]) for row in group]
        normalised = group_advantages([rewards], eps=epsilon)[0] if by_std else centred_rewards(rewards)
        advantages[group] = torch.tensor(normalised, dtype=scores.dtype, device=scores.device)
    spread = advantages.unsqueeze(-1) * response_mask
    return spread, spread


def centred_rewards(rewards: list[float]) -> list[float]:
    """r − mean(group), with an all-equal group (or a group of one) exactly zero.

    >>> centred_rewards([1.0, 0.0]), centred_rewards([8.194925119364804] * 7) == [0.0] * 7
    ([0.5, -0.5], True)
    """
    if len(rewards) < 2 or min(rewards) == max(rewards):
        return [0.0] * len(rewards)
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]
