"""The GRPO loss variants (`grpo.loss`, `grpo.scale_rewards`, `grpo.clip_ratio_high`): each one's loss and gradient
against its paper's formula written out by hand in float64, on a multi-turn batch whose `<information>` tokens and
padding are masked out; the default against the loss as it was before the variants existed; advantages; micro-batch
accumulation on a tiny model; and what the config refuses."""

from __future__ import annotations

import math
import types
from typing import get_args

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from inspo_engine.backends.torch.grpo import GRPOTrainer
from inspo_engine.backends.torch.losses import (
    POLICY_LOSSES,
    LossOptions,
    group_advantages,
    grpo_loss,
    k3_kl,
    masked_mean,
    pass_share,
    register_policy_loss,
    scaled_advantages,
    seq_mean_token_mean,
    token_clipped_loss,
)
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.config import LOSS_AGGREGATION, GRPOConfig, GRPOLoss, RunConfig, loss_norm_tokens, reward_scaling
from inspo_engine.config_fields import ConfigError

F64 = torch.float64
EPS, EPS_HIGH, BETA, NORM = 0.2, 0.28, 0.1, 10

# A group of three multi-turn replies, 7 positions each. Mask 0: the `<information>` tokens the environment wrote
# between two turns (positions 2–4 of reply 0, 1–2 of reply 2) and right padding (reply 1 ends after 4 tokens).
MASK = [
    [1, 1, 0, 0, 0, 1, 1],
    [1, 1, 1, 1, 0, 0, 0],
    [1, 0, 0, 1, 1, 1, 0],
]
# log π_θ − log π_old per position: inside the clip, beyond 1 + ε (e^0.22 = 1.246: clipped at ε = 0.2, not at
# ε_high = 0.28), beyond both (e^0.3), below 1 − ε (e^−0.3); masked positions hold junk that must not matter.
DELTA = [
    [0.05, 0.22, 9.0, -9.0, 9.0, 0.3, -0.1],
    [-0.3, 0.1, -0.05, 0.15, 7.0, -7.0, 7.0],
    [0.02, 5.0, -5.0, -0.25, 0.12, 0.01, 3.0],
]
LOGP = [
    [-1.2, -0.7, -2.0, -3.0, -1.0, -0.4, -2.2],
    [-0.9, -1.6, -0.3, -2.5, -1.0, -1.0, -1.0],
    [-0.5, -1.0, -1.0, -1.8, -0.6, -1.1, -1.0],
]
REF_SHIFT = [
    [0.1, -0.2, 4.0, 4.0, 4.0, 0.3, 0.05],
    [-0.15, 0.2, 0.1, -0.1, 4.0, 4.0, 4.0],
    [0.25, 4.0, 4.0, 0.0, -0.3, 0.1, 4.0],
]
REWARDS = [1.0, 0.0, 0.4]


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = torch.tensor(LOGP, dtype=F64, requires_grad=True)
    old = torch.tensor(LOGP, dtype=F64) - torch.tensor(DELTA, dtype=F64)
    ref = torch.tensor(LOGP, dtype=F64) + torch.tensor(REF_SHIFT, dtype=F64)
    advantages = torch.tensor(group_advantages([REWARDS])[0], dtype=F64)
    return logp, old, ref, advantages, torch.tensor(MASK, dtype=F64)


def _options(variant: str) -> LossOptions:
    return LossOptions(variant, EPS_HIGH if variant == "dapo" else None, NORM if variant == "dr_grpo" else 0)  # type: ignore[arg-type]


def _ours(variant: str) -> tuple[float, torch.Tensor, dict[str, float]]:
    logp, old, ref, advantages, mask = _batch()
    loss, stats = grpo_loss(logp, old, ref, advantages, mask, clip_ratio=EPS, kl_coef=BETA, options=_options(variant))
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad, stats


# -- the papers' formulas, one token at a time ------------------------------------------------------------------


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, 1.0 - low), 1.0 + high)


def _k3(logp: float, ref: float) -> float:
    """The k3 estimate of KL(π_θ ‖ π_ref) (DeepSeekMath eq. 4): π_ref/π_θ − log(π_ref/π_θ) − 1."""
    return math.exp(ref - logp) - (ref - logp) - 1.0


def _k3_grad(logp: float, ref: float) -> float:
    return 1.0 - math.exp(ref - logp)


def _tokens(i: int) -> list[int]:
    return [t for t, m in enumerate(MASK[i]) if m]


def _token_surrogate(ratio: float, advantage: float, high: float) -> tuple[float, float]:
    """−min(r·A, clip(r, 1 − ε, 1 + ε_high)·A) and its derivative in log π_θ (r·A·… where r is not clipped)."""
    clipped = _clip(ratio, EPS, high) * advantage
    if clipped < ratio * advantage:
        return -clipped, 0.0
    return -ratio * advantage, -ratio * advantage


def _hand_token_level(variant: str) -> tuple[float, list[list[float]]]:
    """GRPO (DeepSeekMath eq. 3): −1/G Σ_i 1/|o_i| Σ_t [min(r_it·Â_i, clip(r_it, 1 − ε, 1 + ε)·Â_i) − β·D_KL];
    Dr. GRPO ("Understanding R1-Zero-Like Training", Sec. 3.1, Fig. 1): 1/|o_i| replaced by a constant 1/L;
    DAPO (arXiv 2503.14476, eq. 8–9): 1/Σ_i |o_i| over the whole group, clip(r, 1 − ε_low, 1 + ε_high)."""
    advantages = group_advantages([REWARDS])[0]
    total_tokens = sum(len(_tokens(i)) for i in range(len(MASK)))
    high = EPS_HIGH if variant == "dapo" else EPS
    loss, grad = 0.0, [[0.0] * len(MASK[0]) for _ in MASK]
    for i, advantage in enumerate(advantages):
        weight = {
            "grpo": 1 / (len(MASK) * len(_tokens(i))),
            "dr_grpo": 1 / (len(MASK) * NORM),
            "dapo": 1 / total_tokens,
        }[variant]
        for t in _tokens(i):
            ratio = math.exp(DELTA[i][t])
            ref = LOGP[i][t] + REF_SHIFT[i][t]
            pg, pg_grad = _token_surrogate(ratio, advantage, high)
            loss += weight * (pg + BETA * _k3(LOGP[i][t], ref))
            grad[i][t] = weight * (pg_grad + BETA * _k3_grad(LOGP[i][t], ref))
    return loss, grad


def _hand_gspo() -> tuple[float, list[list[float]]]:
    """GSPO (arXiv 2507.18071, eq. 5–7): −1/G Σ_i min(s_i·Â_i, clip(s_i, 1 − ε, 1 + ε)·Â_i) with
    s_i = (π_θ(y_i|x)/π_old(y_i|x))^(1/|y_i|) = exp(1/|y_i| Σ_t log r_it), |y_i| the reply's own tokens; the KL
    term as in GRPO. ∂s_i/∂log π_θ(y_it) = s_i/|y_i|."""
    advantages = group_advantages([REWARDS])[0]
    loss, grad = 0.0, [[0.0] * len(MASK[0]) for _ in MASK]
    for i, advantage in enumerate(advantages):
        tokens = _tokens(i)
        s = math.exp(sum(DELTA[i][t] for t in tokens) / len(tokens))
        pg, pg_grad = _token_surrogate(s, advantage, EPS)
        loss += pg / len(MASK)
        for t in tokens:
            ref = LOGP[i][t] + REF_SHIFT[i][t]
            loss += BETA * _k3(LOGP[i][t], ref) / (len(MASK) * len(tokens))
            grad[i][t] = (pg_grad / len(tokens) + BETA * _k3_grad(LOGP[i][t], ref) / len(tokens)) / len(MASK)
    return loss, grad


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo"])
def test_each_token_level_loss_and_its_gradient_follow_the_papers_formula(variant):
    expected_loss, expected_grad = _hand_token_level(variant)
    loss, grad, _ = _ours(variant)
    assert loss == pytest.approx(expected_loss, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=F64), rtol=1e-12, atol=1e-15)


def test_gspo_loss_and_gradient_follow_the_sequence_level_formula():
    expected_loss, expected_grad = _hand_gspo()
    loss, grad, _ = _ours("gspo")
    assert loss == pytest.approx(expected_loss, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=F64), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_information_tokens_and_padding_get_exactly_zero_gradient(variant):
    _, grad, _ = _ours(variant)
    masked = torch.tensor(MASK) == 0
    assert torch.equal(grad[masked], torch.zeros(int(masked.sum()), dtype=F64))
    assert (grad[~masked] != 0).any()


def test_the_variants_differ_on_this_batch_so_each_formula_is_tested_apart():
    losses = {variant: _ours(variant)[0] for variant in ("grpo", "dr_grpo", "dapo", "gspo")}
    assert len({round(v, 12) for v in losses.values()}) == 4


def test_clip_higher_lets_a_ratio_between_one_plus_eps_and_one_plus_eps_high_train():
    """Reply 0 (Â > 0), token 1: r = e^0.22 is clipped at ε = 0.2 (no gradient) but not at ε_high = 0.28."""
    logp, old, ref, advantages, mask = _batch()
    symmetric = LossOptions("dapo", None)
    loss, stats = grpo_loss(logp, old, ref, advantages, mask, clip_ratio=EPS, kl_coef=0.0, options=symmetric)
    (grad_symmetric,) = torch.autograd.grad(loss, logp)
    _, grad_high, stats_high = _ours("dapo")
    assert grad_symmetric[0, 1] == 0.0 and grad_high[0, 1] != 0.0
    assert stats_high["clip_fraction"] < stats["clip_fraction"]


# -- the default is the loss as it was --------------------------------------------------------------------------


def _loss_before_variants(logprobs, old_logprobs, ref_logprobs, advantages, mask, *, clip_ratio, kl_coef):
    """`grpo_loss` as it read before `grpo.loss` existed (seq-mean-token-mean, symmetric clip), verbatim."""
    trained = mask != 0
    zeros = torch.zeros_like(logprobs)
    log_ratio = torch.where(trained, logprobs - old_logprobs, zeros)
    ratio = torch.exp(log_ratio)
    advantage = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * advantage
    clipped = ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio) * advantage
    surrogate = torch.minimum(unclipped, clipped)
    kl = k3_kl(logprobs, torch.where(trained, ref_logprobs, logprobs))
    pg_loss = seq_mean_token_mean(-surrogate, mask)
    kl_loss = seq_mean_token_mean(kl, mask)
    loss = pg_loss + kl_coef * kl_loss
    stats = {
        "pg_loss": pg_loss.item(),
        "kl": kl_loss.item(),
        "clip_fraction": masked_mean((clipped < unclipped).to(logprobs.dtype), mask).item(),
        "ratio_mean": masked_mean(ratio, mask).item(),
    }
    return loss, stats


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_the_default_loss_is_bit_for_bit_the_loss_before_the_variants(dtype):
    generator = torch.Generator().manual_seed(7)
    logp = (-torch.rand((6, 11), generator=generator, dtype=dtype) * 3).requires_grad_(True)
    old = logp.detach() + (torch.rand((6, 11), generator=generator, dtype=dtype) - 0.5) * 0.8
    ref = logp.detach() + (torch.rand((6, 11), generator=generator, dtype=dtype) - 0.5)
    mask = (torch.rand((6, 11), generator=generator) > 0.3).to(dtype)
    mask[5] = 0  # a reply with no trained token
    advantages = torch.randn(6, generator=generator, dtype=dtype)
    before, before_stats = _loss_before_variants(logp, old, ref, advantages, mask, clip_ratio=0.2, kl_coef=0.05)
    (before_grad,) = torch.autograd.grad(before, logp)
    config = LossOptions.from_config(GRPOConfig())
    now, now_stats = grpo_loss(logp, old, ref, advantages, mask, clip_ratio=0.2, kl_coef=0.05, options=config)
    (now_grad,) = torch.autograd.grad(now, logp)
    assert torch.equal(now, before) and torch.equal(now_grad, before_grad)
    assert now_stats == before_stats


def test_default_settings_resolve_to_the_old_behaviour():
    grpo = RunConfig().grpo
    assert grpo.loss == "grpo" and reward_scaling(grpo) == "group" and grpo.clip_ratio_high is None
    assert not grpo.drop_truncated
    rewards = [[1.0, 0.0, 0.3], [0.2, 0.2, 0.2]]
    assert scaled_advantages(rewards, "group") == group_advantages(rewards)


# -- the registry of losses --------------------------------------------------------------------------------------


def test_the_configs_loss_names_are_the_registered_losses_each_with_its_aggregation():
    assert set(get_args(GRPOLoss)) == set(POLICY_LOSSES) == set(LOSS_AGGREGATION)


def test_the_configs_loss_name_picks_the_function_registered_under_it(monkeypatch):
    logp, old, _, advantages, mask = _batch()
    plain, _ = grpo_loss(logp, old, None, advantages, mask, clip_ratio=EPS, kl_coef=0.0)
    seen = []

    def doubled(*args, clip_low, clip_high):
        seen.append((clip_low, clip_high))
        terms, ratio, clipped = token_clipped_loss(*args, clip_low=clip_low, clip_high=clip_high)
        return 2 * terms, ratio, clipped

    monkeypatch.setitem(POLICY_LOSSES, "grpo", doubled)
    loss, _ = grpo_loss(logp, old, None, advantages, mask, clip_ratio=EPS, kl_coef=0.0)
    assert seen == [(EPS, EPS)] and loss.item() == pytest.approx(2 * plain.item())


def test_a_name_registered_twice_or_never_is_refused():
    with pytest.raises(ValueError, match="already registered as 'grpo'"):
        register_policy_loss("grpo")(token_clipped_loss)
    with pytest.raises(ValueError, match="no policy loss is registered as 'ppo'"):
        LossOptions("ppo")  # type: ignore[arg-type]


# -- advantages -------------------------------------------------------------------------------------------------


def test_rewards_scaled_by_group_batch_or_nothing():
    """group: DAPO eq. 10 / GRPO's outcome supervision, (r − mean_group)/std_group; none: Dr. GRPO's r − mean_group;
    batch: r − mean_group over the std of every reward of the batch (unbiased, as the group std)."""
    rewards = [[1.0, 0.0, 0.5], [0.0, 0.0, 0.9], [0.3, 0.3, 0.3]]
    none = scaled_advantages(rewards, "none")
    assert none[0] == pytest.approx([0.5, -0.5, 0.0]) and none[1] == pytest.approx([-0.3, -0.3, 0.6])
    flat = [r for g in rewards for r in g]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((r - mean) ** 2 for r in flat) / (len(flat) - 1))
    batch = scaled_advantages(rewards, "batch", eps=0.0)
    assert batch[0] == pytest.approx([0.5 / std, -0.5 / std, 0.0]) and batch[1] == pytest.approx(
        [-0.3 / std] * 2 + [0.6 / std]
    )
    group_std = math.sqrt(0.25)
    assert scaled_advantages(rewards, "group", eps=0.0)[0] == pytest.approx([0.5 / group_std, -0.5 / group_std, 0.0])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_an_all_equal_group_gets_exact_zeros_however_rewards_are_scaled(scale):
    assert scaled_advantages([[3.094932485201144] * 3, [1.0, 0.0]], scale)[0] == [0.0, 0.0, 0.0]


def test_dr_grpo_drops_the_std_unless_told_otherwise():
    assert reward_scaling(GRPOConfig(loss="dr_grpo")) == "none"
    assert reward_scaling(GRPOConfig(loss="dr_grpo", scale_rewards="group")) == "group"
    assert reward_scaling(GRPOConfig(loss="gspo")) == "group"


def test_dr_grpo_divides_by_the_most_tokens_a_rollout_can_write_unless_given():
    config = RunConfig.from_dict({"env": {"max_turns": 2, "max_turn_tokens": 100}, "backend": {"max_new_tokens": 80}})
    assert loss_norm_tokens(config) == 3 * 80
    assert loss_norm_tokens(config.with_overrides({"grpo.norm_tokens": 64})) == 64
    with pytest.raises(ValueError, match="norm_tokens"):
        LossOptions("dr_grpo", None, 0)


# -- passes add up to one pass over the mini-batch --------------------------------------------------------------


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_passes_weighted_by_their_share_add_up_to_the_whole_batch(variant):
    logp, old, ref, advantages, mask = _batch()
    samples = [TrainSample([1], [2] * 7, [int(m) for m in row], 0.0) for row in MASK]
    options = _options(variant)
    whole, _ = grpo_loss(logp, old, ref, advantages, mask, clip_ratio=EPS, kl_coef=BETA, options=options)
    parts = torch.zeros((), dtype=F64)
    for rows in ([0], [1, 2]):
        loss, _ = grpo_loss(
            logp[rows],
            old[rows],
            ref[rows],
            advantages[rows],
            mask[rows],
            clip_ratio=EPS,
            kl_coef=BETA,
            options=options,
        )
        parts = parts + loss * pass_share(variant, [samples[i] for i in rows], samples)  # type: ignore[arg-type]
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12)


@pytest.fixture(scope="module")
def tiny_llama():
    """A one-layer, 32-wide Llama over a 64-token vocabulary, randomly initialised from a fixed seed."""
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    return model.eval().requires_grad_(False)


@pytest.mark.parametrize("variant", ["dapo", "dr_grpo", "gspo"])
def test_micro_batches_accumulate_to_one_pass_for_every_variant(tiny_llama, variant):
    """Two groups of two multi-turn rollouts of different lengths, observations masked: the gradient left by
    passes of one rollout equals that of one pass over all four (DAPO's token-mean weighs passes by tokens)."""
    import copy

    tokenizer = types.SimpleNamespace(pad_token_id=0, eos_token_id=0)
    config = GRPOConfig(
        group_size=2, batch_size=2, mini_batch_size=2, micro_batch_size=2, loss=variant, norm_tokens=12, kl_coef=0.1
    )
    policy = copy.deepcopy(tiny_llama).requires_grad_(True)
    trainer = GRPOTrainer(policy, tokenizer, config, device=torch.device("cpu"), ref_model=tiny_llama)  # type: ignore[arg-type]
    samples = [
        TrainSample([5, 6, 7], [8, 9, 30, 31, 10], [1, 1, 0, 0, 1], 0.9),
        TrainSample([5, 6, 7], [11, 12], [1, 1], -0.9),
        TrainSample([13, 14], [15, 16, 17, 32, 33, 34, 18], [1, 1, 1, 0, 0, 0, 1], -0.5),
        TrainSample([13, 14], [19], [1], 0.5),
    ]
    old = [row + 0.07 for row in trainer.logprob_rows(trainer.policy, samples)]
    ref = trainer.reference_logprob_rows(samples)
    trainer.accumulate(samples, old, ref, micro_size=4)
    whole = {n: p.grad.clone() for n, p in trainer.policy.named_parameters()}
    trainer.accumulate(samples, old, ref, micro_size=1)
    for name, param in trainer.policy.named_parameters():
        torch.testing.assert_close(param.grad, whole[name], rtol=1e-4, atol=1e-7, msg=name)


# -- what the config refuses ------------------------------------------------------------------------------------


def test_an_unknown_loss_or_scaling_is_refused_with_its_field():
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"grpo": {"loss": "ppo", "scale_rewards": "global"}})
    assert {e.field for e in error.value.errors} == {"grpo.loss", "grpo.scale_rewards"}
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"grpo": {"clip_ratio_high": 0}})
    assert [e.field for e in error.value.errors] == ["grpo.clip_ratio_high"]


@pytest.mark.parametrize(
    ("settings", "field"),
    [({"scale_rewards": "batch"}, "grpo.scale_rewards"), ({"drop_truncated": True}, "grpo.drop_truncated")],
)
def test_what_verl_cannot_honour_is_refused_for_the_verl_backend_naming_it(settings, field):
    RunConfig.from_dict({"grpo": settings})  # the torch backend takes it
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"backend": {"name": "verl"}, "grpo": settings})
    assert [e.field for e in error.value.errors] == [field]
    assert "torch backend only" in str(error.value)


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_every_variant_is_accepted_on_both_backends(variant):
    for backend in ("torch", "verl"):
        config = RunConfig.from_dict({"backend": {"name": backend}, "grpo": {"loss": variant, "clip_ratio_high": 0.28}})
        assert config.grpo.loss == variant


# -- through the torch backend ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_backend_trains_dr_grpo_and_leaves_truncated_replies_out_of_the_loss():
    """A dr_grpo run with DAPO's overlong filtering on the real SmolLM2: the backend resolves Dr. GRPO's constant,
    and the one reply marked truncated takes no part in the update (its tokens are not trained)."""
    from inspo_engine.backends.torch.backend import TorchBackend
    from inspo_engine.env.builtin import builtin_dataset
    from inspo_engine.presets import preset
    from inspo_engine.types import RolloutRequest
    from tests.engine.torch_backend.conftest import CACHE_DIR, EchoRetriever

    overrides = {"backend.max_new_tokens": 12, "env.max_turns": 2, "seed": 7}
    config = preset("smoke").with_overrides(overrides | {"grpo.loss": "dr_grpo", "grpo.drop_truncated": True})
    backend = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    assert backend.trainer.config.norm_tokens == loss_norm_tokens(config) == 3 * 12
    assert backend.scale_rewards == "none"
    questions = builtin_dataset().train[:2]
    groups = backend.rollout([RolloutRequest("i0", SEED_TEXT, q) for q in questions], group_size=2)
    for group in groups:
        for trajectory, reward in zip(group, (1.0, 0.0), strict=True):
            trajectory.reward = reward
            trajectory.payload.truncated = False
    groups[0][0].payload.truncated = True
    result = backend.update(groups)
    kept = sum(len(t.payload.response_ids) for group in groups for t in group) - len(groups[0][0].payload.response_ids)
    assert result.metrics["dropped_truncated"] == 1.0 and result.metrics["response_tokens"] == kept
    assert result.metrics["optimizer_steps"] == 1.0


SEED_TEXT = RunConfig().population.seed_instruction
