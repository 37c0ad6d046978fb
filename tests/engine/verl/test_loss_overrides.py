"""`grpo.loss` and its settings as verl 0.9.1's own keys: every mapped key exists in verl's trainer yaml, every
value passes verl's own config dataclasses (`ActorConfig`, `AlgoConfig`) and names a policy loss verl registers."""

from __future__ import annotations

from typing import get_args

import pytest

from tests.engine.verl._support import require_verl

require_verl()

from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.overrides import loss_pairs, verl_overrides  # noqa: E402
from inspo_engine.config import GRPOLoss, RunConfig  # noqa: E402

VERL = {"backend": {"name": "verl"}}


def _composed(grpo: dict[str, object]) -> object:
    return compose(verl_overrides(RunConfig.from_dict(VERL | {"grpo": grpo})))


@pytest.mark.parametrize("variant", get_args(GRPOLoss))
def test_each_variants_keys_exist_in_verls_schema_and_pass_its_dataclasses(variant):
    config = RunConfig.from_dict(VERL | {"grpo": {"loss": variant}})
    pairs = loss_pairs(config)
    assert all(not key.startswith("+") for key, _ in pairs)
    composed = compose(verl_overrides(config))
    actor = omega_conf_to_dataclass(composed.actor_rollout_ref.actor)  # verl validates loss_agg_mode here
    algorithm = omega_conf_to_dataclass(composed.algorithm, AlgoConfig)
    get_policy_loss_fn(actor.policy_loss.loss_mode)  # raises for a loss verl does not register
    assert isinstance(algorithm.norm_adv_by_std_in_grpo, bool)


def test_grpo_is_verls_vanilla_loss_with_sequence_mean_token_mean_and_std_scaling():
    actor = _composed({}).actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "vanilla" and actor.loss_agg_mode == "seq-mean-token-mean"
    assert actor.clip_ratio_low == actor.clip_ratio_high == 0.2 and actor.loss_scale_factor is None
    assert _composed({}).algorithm.norm_adv_by_std_in_grpo is True


def test_dr_grpo_sums_tokens_over_the_same_constant_as_the_torch_backend_and_drops_the_std():
    config = RunConfig.from_dict(VERL | {"grpo": {"loss": "dr_grpo"}, "env": {"max_turns": 2, "max_turn_tokens": 300}})
    composed = compose(verl_overrides(config))
    actor = composed.actor_rollout_ref.actor
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor == 3 * 300
    assert composed.algorithm.norm_adv_by_std_in_grpo is False
    kept = _composed({"loss": "dr_grpo", "scale_rewards": "group", "norm_tokens": 128})
    assert kept.algorithm.norm_adv_by_std_in_grpo is True and kept.actor_rollout_ref.actor.loss_scale_factor == 128


def test_dapo_is_token_mean_with_clip_higher():
    actor = _composed({"loss": "dapo", "clip_ratio_high": 0.28}).actor_rollout_ref.actor
    assert actor.loss_agg_mode == "token-mean" and actor.policy_loss.loss_mode == "vanilla"
    assert actor.clip_ratio_low == 0.2 and actor.clip_ratio_high == 0.28


def test_gspo_is_verls_gspo_loss_aggregated_per_sequence():
    actor = _composed({"loss": "gspo", "clip_ratio": 0.0003, "clip_ratio_high": 0.0004}).actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "gspo" and actor.loss_agg_mode == "seq-mean-token-mean"
    assert actor.clip_ratio_low == 0.0003 and actor.clip_ratio_high == 0.0004


def test_verls_dataclass_check_would_catch_a_mode_it_does_not_know():
    """The check above has teeth: an aggregation verl lacks fails in its own `ActorConfig`."""
    overrides = [o for o in verl_overrides(RunConfig.from_dict(VERL)) if ".loss_agg_mode=" not in o]
    composed = compose([*overrides, "actor_rollout_ref.actor.loss_agg_mode=seq-sum-token-bogus"])
    with pytest.raises(Exception, match="Invalid loss_agg_mode"):  # hydra wraps the ValueError
        omega_conf_to_dataclass(composed.actor_rollout_ref.actor)


def test_verls_advantage_leaves_out_the_std_when_the_config_says_so():
    import numpy as np
    import torch

    from inspo_engine.backends.verl.advantage import grpo_outcome_advantage

    scores = torch.zeros((4, 3))
    scores[:, -1] = torch.tensor([1.0, 0.0, 0.4, 0.4])
    index = np.array(["a", "a", "b", "b"])
    unscaled, _ = grpo_outcome_advantage(
        scores, torch.ones_like(scores), index, config=AlgoConfig(norm_adv_by_std_in_grpo=False)
    )
    assert unscaled[:, 0].tolist() == [0.5, -0.5, 0.0, 0.0]
    scaled, _ = grpo_outcome_advantage(scores, torch.ones_like(scores), index, config=AlgoConfig())
    assert scaled[0, 0].item() == pytest.approx(0.5 / (0.5**0.5 + 1e-6))
