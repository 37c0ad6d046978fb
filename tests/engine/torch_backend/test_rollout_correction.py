"""Rollout correction (`grpo.rollout_correction` 'tis'): the truncated importance weights and the mismatch metrics by
hand, their place in the loss, and the rollout engine's record of the log-probs it sampled with."""

from __future__ import annotations

import math

import pytest
import torch

from inspo_engine.backends.torch.grpo import layout_logprobs, rollout_rows
from inspo_engine.backends.torch.logits import split_causal_lm
from inspo_engine.backends.torch.losses import grpo_loss, rollout_mismatch, tis_weights
from inspo_engine.backends.torch.prefix import padded_layout
from inspo_engine.backends.torch.rollout import RolloutEngine, RolloutSettings
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.config import GRPOConfig, RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.types import Question

from .conftest import EchoRetriever

CPU = torch.device("cpu")
OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.2, -4.0, -1.0, -1.0]])
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.5, -9.0], [-0.2, -4.0, -2.0, -1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])


def test_tis_weights_are_the_ratio_of_old_to_rollout_probabilities_capped_above():
    weights = tis_weights(OLD, ROLLOUT, MASK, cap=2.0)
    expected = [[math.exp(0.5), math.exp(-1.0), 1.0, 1.0], [1.0, 1.0, 2.0, 1.0]]  # e^1 capped at 2; masked → 1
    torch.testing.assert_close(weights, torch.tensor(expected))
    assert tis_weights(OLD, ROLLOUT, MASK, cap=1.2)[0, 0] == pytest.approx(1.2)


def test_tis_weights_are_exactly_one_when_the_two_log_probs_agree_and_carry_no_gradient():
    old = OLD.clone().requires_grad_(True)
    weights = tis_weights(old, OLD.clone(), MASK, cap=2.0)
    assert torch.equal(weights, torch.ones_like(OLD)) and not weights.requires_grad


def test_the_mismatch_metrics_by_hand():
    stats = rollout_mismatch(OLD, ROLLOUT, MASK, clip_ratio=0.2)
    gaps = [0.5, -1.0, 0.0, 0.0, 0.0, 1.0, 0.0]  # old − rollout on the 7 trained tokens
    assert stats["rollout_logp_abs_diff"] == pytest.approx(sum(abs(g) for g in gaps) / 7)
    assert stats["rollout_kl"] == pytest.approx(sum(math.exp(g) - g - 1 for g in gaps) / 7)
    assert stats["rollout_ratio_outside_clip"] == pytest.approx(3 / 7)  # e^0.5, e^-1, e^1 leave [0.8, 1.2]


def _loss(rollout, cap, logprobs):
    advantages = torch.tensor([1.0, -0.5])
    return grpo_loss(
        logprobs, OLD, OLD, advantages, MASK, clip_ratio=0.2, kl_coef=0.1, rollout_logprobs=rollout, tis_cap=cap
    )


def test_tis_weights_the_policy_gradient_term_only_and_agreeing_log_probs_change_nothing():
    logprobs = (OLD + 0.05).requires_grad_(True)
    plain, plain_stats = _loss(None, None, logprobs)
    same, same_stats = _loss(OLD.clone(), 2.0, logprobs)
    assert same.item() == pytest.approx(plain.item()) and same_stats["rollout_kl"] == 0.0
    _, stats = _loss(ROLLOUT, 2.0, logprobs)
    weights = tis_weights(OLD, ROLLOUT, MASK, cap=2.0)
    ratio = torch.exp(logprobs - OLD).detach()
    surrogate = -torch.minimum(
        ratio * torch.tensor([[1.0], [-0.5]]), ratio.clamp(0.8, 1.2) * torch.tensor([[1.0], [-0.5]])
    )
    per_reply = (surrogate * weights * MASK).sum(-1) / MASK.sum(-1)
    assert stats["pg_loss"] == pytest.approx(per_reply.mean().item(), rel=1e-5)
    assert stats["kl"] == pytest.approx(plain_stats["kl"])  # the KL term is not weighted


def test_rollout_rows_keep_the_trained_tokens_and_need_every_sample_to_carry_them():
    sample = TrainSample([1, 2], [3, 4, 5, 6], [1, 0, 0, 1], 1.0, rollout_logprobs=[-0.5, 0.0, 0.0, -2.0])
    (row,) = rollout_rows([sample], device=CPU)
    assert row.tolist() == [-0.5, -2.0]
    assert rollout_rows([sample, TrainSample([1], [2], [1], 0.0)], device=CPU) is None


def test_the_settings_are_validated_and_refused_for_verl():
    assert GRPOConfig().rollout_correction == "none" and GRPOConfig().tis_cap == 2.0
    with pytest.raises(ConfigError, match=r"grpo\.tis_cap"):
        RunConfig().with_overrides({"grpo.tis_cap": 0.5})
    with pytest.raises(ConfigError, match=r"grpo\.rollout_correction.*torch backend only"):
        RunConfig().with_overrides({"backend.name": "verl", "grpo.rollout_correction": "tis"})


# -- the engine's record and the trainer's use of it -------------------------------------------------------------


def _engine(model, tokenizer, **kwargs) -> RolloutEngine:
    settings = RolloutSettings(max_turns=1, max_turn_tokens=12, max_obs_tokens=40, max_prompt_length=1024, top_k=1)
    return RolloutEngine(model, tokenizer, EchoRetriever(), settings, device=CPU, **kwargs)


QUESTIONS = [Question("q1", "What is the capital of Peru?", ["Lima"]), Question("q2", "Who wrote Hamlet?", ["x"])]


def test_recorded_log_probs_are_the_samplers_own_and_the_trainer_reads_them_as_its_old_ones(smollm2):
    """Read from the policy itself, the rollout's log-probs equal the trainer's (to float32 rounding); observations
    get 0.0; greedy rollouts record nothing."""
    model, tokenizer = smollm2
    torch.set_num_threads(1)
    engine = _engine(model, tokenizer, record_logprobs=True)
    rollouts = engine.generate([("Search first.", q) for q in QUESTIONS for _ in range(2)],
                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert all(r.rollout_logprobs is not None and len(r.rollout_logprobs) == len(r.response_ids) for r in rollouts)
    for r in rollouts:
        assert all(lp == 0.0 for lp, m in zip(r.rollout_logprobs, r.response_mask, strict=True) if not m)
        assert all(lp < 0.0 for lp, m in zip(r.rollout_logprobs, r.response_mask, strict=True) if m)
    assert all(r.rollout_logprobs is None for r in engine.generate([("Search first.", QUESTIONS[0])], greedy=True))
    samples = [
        TrainSample(r.prompt_ids, r.response_ids, r.response_mask, 1.0 - i % 2, rollout_logprobs=r.rollout_logprobs)
        for i, r in enumerate(rollouts)
    ]
    with torch.no_grad():  # the trainer's computation of old log-probs (`GRPOTrainer.logprob_rows`)
        layout = padded_layout(samples, pad_id=tokenizer.pad_token_id, device=CPU)
        old, _ = layout_logprobs(split_causal_lm(model), layout)
    recorded = torch.cat(rollout_rows(samples, device=CPU))
    assert (old - recorded).abs().max() < 1e-3
    stats = rollout_mismatch(old[None], recorded[None], torch.ones(1, len(old)), clip_ratio=0.2)
    assert stats["rollout_logp_abs_diff"] < 1e-4 and stats["rollout_ratio_outside_clip"] == 0.0
