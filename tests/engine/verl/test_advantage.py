"""The verl run's GRPO advantage (`inspo_grpo`): verl's normalisation, with an all-equal group decided by equality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.engine.verl._support import require_verl

require_verl()

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from inspo_engine.backends.torch.losses import group_advantages  # noqa: E402
from inspo_engine.backends.verl import advantage  # noqa: E402
from inspo_engine.backends.verl.overrides import ADVANTAGE_ESTIMATOR  # noqa: E402


def verl_batch(rewards: list[list[float]], length: int = 3) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """verl's inputs for `rewards` (one list per prompt): the outcome reward on each row's last token."""
    flat = torch.tensor([r for group in rewards for r in group], dtype=torch.float32)
    token_rewards = torch.zeros((len(flat), length))
    token_rewards[:, -1] = flat
    index = np.array([f"uid-{g}" for g, group in enumerate(rewards) for _ in group], dtype=object)
    return token_rewards, torch.ones_like(token_rewards), index


def test_verl_finds_our_estimator_by_the_name_the_overrides_give() -> None:
    assert core_algos.get_adv_estimator_fn(ADVANTAGE_ESTIMATOR) is advantage.grpo_outcome_advantage


@pytest.mark.parametrize("rewards", [[3.094932485201144] * 3, [8.194925119364804] * 7, [0.2] * 5])
def test_an_all_equal_group_gets_exactly_zero_in_both_backends(rewards: list[float]) -> None:
    assert group_advantages([rewards]) == [[0.0] * len(rewards)]
    advantages, returns = advantage.grpo_outcome_advantage(*verl_batch([rewards]))
    assert torch.equal(advantages, torch.zeros_like(advantages)) and torch.equal(returns, advantages)


def test_it_equals_the_torch_backends_advantages_spread_over_each_response() -> None:
    rewards = [[1.0, 0.0, 0.0, 0.2, 1.0], [0.2, 0.2, 1.0, 0.0, 0.0], [0.0] * 5, [0.7, 0.7]]
    token_rewards, mask, index = verl_batch(rewards)
    mask[0, 0] = 0  # a padded token gets no advantage
    advantages, _ = advantage.grpo_outcome_advantage(token_rewards, mask, index)
    ours = torch.tensor([a for group in group_advantages(rewards) for a in group])
    assert advantages[:, -1].tolist() == pytest.approx(ours.tolist(), abs=1e-6)
    assert advantages[0, 0] == 0 and advantages[0, 1] == pytest.approx(ours[0].item(), abs=1e-6)


def test_without_the_std_it_only_centres_and_keeps_an_all_equal_group_at_zero() -> None:
    batch = verl_batch([[1.0, 0.0, 0.0, 1.0], [8.194925119364804] * 7])
    advantages, _ = advantage.grpo_outcome_advantage(
        *batch, config=OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    )
    assert advantages[:, -1].tolist() == [0.5, -0.5, -0.5, 0.5] + [0.0] * 7
