"""GRPO: advantages and the loss by hand, then real updates of SmolLM2-135M on CPU (masking, accumulation, resume)."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.backends.torch.grpo import (
    GRPOTrainer,
    collate,
    cosine_with_warmup,
    forward_passes,
    pad_rows,
    policy_loss,
)
from inspo_engine.backends.torch.losses import (
    group_advantages,
    grpo_loss,
    k3_kl,
    logits_to_logprobs,
    masked_mean,
    token_logprobs,
)
from inspo_engine.backends.torch.model import load_policy
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.config import GRPOConfig
from inspo_engine.models import SMOLLM2, resolve_model

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"
CPU = torch.device("cpu")


# -- advantages ------------------------------------------------------------------------------------------------


def test_advantages_are_normalised_by_the_unbiased_std_of_each_group():
    (first, second) = group_advantages([[1.0, 0.0, 0.0, 0.0], [2.0, 4.0]])
    std = math.sqrt(3 / 12)  # rewards 1,0,0,0: mean 1/4, squared deviations 3/4 over n - 1 = 3
    assert first == pytest.approx([0.75 / (std + 1e-6), -0.25 / (std + 1e-6)] + [-0.25 / (std + 1e-6)] * 2)
    std = math.sqrt(2.0)  # rewards 2,4: squared deviations 2 over n - 1 = 1
    assert second == pytest.approx([-1.0 / (std + 1e-6), 1.0 / (std + 1e-6)])


@pytest.mark.verl
def test_advantages_equal_verls_grpo_estimator_so_both_backends_normalise_alike():
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    rewards = [[1.0, 0.0, 0.0, 0.2, 1.0], [0.2, 0.2, 1.0, 0.0, 0.0], [0.0] * 5]
    flat = torch.tensor([r for group in rewards for r in group])
    scores = torch.zeros((len(flat), 3))
    scores[:, -1] = flat
    index = np.array([g for g, group in enumerate(rewards) for _ in group])
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        scores, torch.ones_like(scores), index, norm_adv_by_std_in_grpo=True
    )
    ours = [a for group in group_advantages(rewards) for a in group]
    assert theirs[:, -1].tolist() == pytest.approx(ours, abs=1e-5)


def test_a_group_with_equal_rewards_gets_zero_advantages():
    assert group_advantages([[1.0, 1.0, 1.0], [0.0, 0.0], [0.7]]) == [[0.0, 0.0, 0.0], [0.0, 0.0], [0.0]]


def test_an_all_equal_group_is_zero_even_when_the_mean_of_its_floats_is_not_that_float():
    # sum([x] * 3) / 3 != x here, so the group's std is 4.4e-10 rather than 0 (found by hypothesis)
    assert group_advantages([[3.094932485201144] * 3]) == [[0.0, 0.0, 0.0]]


@given(st.lists(st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=8), min_size=1, max_size=6))
def test_advantages_have_zero_mean_per_group_and_zeros_for_constant_groups(rewards):
    for group, advantages in zip(rewards, group_advantages(rewards), strict=True):
        assert len(advantages) == len(group)
        assert sum(advantages) == pytest.approx(0.0, abs=1e-6 * len(group))
        if max(group) == min(group):
            assert advantages == [0.0] * len(group)


# -- the loss by hand ------------------------------------------------------------------------------------------


def test_masked_mean_ignores_masked_entries_even_when_they_are_not_finite():
    values = torch.tensor([[1.0, 3.0, float("nan")], [2.0, float("inf"), 4.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert masked_mean(values, mask).item() == pytest.approx(2.5)
    assert masked_mean(values, mask, dim=-1).tolist() == [2.0, 3.0]
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_loss_when_policy_old_and_reference_agree_has_ratio_one_and_no_kl():
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.9, 0.3, 0.2]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([1.0, -1.0])
    loss, stats = grpo_loss(logprobs, logprobs, logprobs, advantages, mask, clip_ratio=0.2, kl_coef=0.1)
    assert stats["ratio_mean"] == 1.0
    assert stats["kl"] == 0.0
    assert stats["clip_fraction"] == 0.0
    # −A·ratio averaged per trajectory then over trajectories: (−1 + 1) / 2
    assert loss.item() == pytest.approx(0.0)
    assert stats["pg_loss"] == pytest.approx(0.0)


def test_clipping_engages_beyond_one_plus_or_minus_epsilon():
    old = torch.zeros(1, 4)
    # ratios 1.5 and 0.6 are outside [0.8, 1.2]; 1.1 and 0.9 inside.
    logprobs = torch.log(torch.tensor([[1.5, 1.1, 0.6, 0.9]]))
    mask = torch.ones(1, 4)
    loss, stats = grpo_loss(logprobs, old, logprobs, torch.tensor([1.0]), mask, clip_ratio=0.2, kl_coef=0.0)
    # A > 0: min(r·A, clip(r)·A) clips 1.5 → 1.2 but keeps 0.6 (the pessimistic term is already the smaller one).
    assert stats["clip_fraction"] == pytest.approx(1 / 4)
    assert loss.item() == pytest.approx(-(1.2 + 1.1 + 0.6 + 0.9) / 4)
    _, negative = grpo_loss(logprobs, old, logprobs, torch.tensor([-1.0]), mask, clip_ratio=0.2, kl_coef=0.0)
    # A < 0: the clip binds below instead: 0.6 → 0.8 counts, 1.5 does not.
    assert negative["clip_fraction"] == pytest.approx(1 / 4)
    assert negative["pg_loss"] == pytest.approx((1.5 + 1.1 + 0.8 + 0.9) / 4)


def test_clipped_tokens_get_no_gradient():
    logprobs = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    loss, _ = grpo_loss(
        logprobs,
        torch.zeros(1, 2),
        logprobs.detach(),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        clip_ratio=0.2,
        kl_coef=0.0,
    )
    loss.backward()
    assert logprobs.grad is not None
    assert logprobs.grad[0, 0].item() == 0.0
    assert logprobs.grad[0, 1].item() == pytest.approx(-1.1 / 2)


def test_k3_kl_matches_a_hand_computation_and_is_never_negative():
    logprobs = torch.tensor([math.log(0.5), math.log(0.2), math.log(0.3)])
    ref = torch.tensor([math.log(0.25), math.log(0.4), math.log(0.3)])
    # d = ref − logp: log(1/2), log(2), 0 → e^d − d − 1
    expected = [0.5 - math.log(0.5) - 1, 2 - math.log(2) - 1, 0.0]
    assert k3_kl(logprobs, ref).tolist() == pytest.approx(expected)
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=generator) * 5, torch.randn(1000, generator=generator) * 5
    assert bool((k3_kl(a, b) >= 0).all())
    assert k3_kl(torch.tensor([0.0]), torch.tensor([100.0])).item() == 10.0  # clamped like verl's low_var_kl


def test_kl_enters_the_loss_with_weight_beta_and_the_same_masking():
    logprobs = torch.tensor([[math.log(0.5), math.log(0.5)], [math.log(0.2), 0.0]])
    ref = torch.tensor([[math.log(0.25), math.log(0.5)], [math.log(0.4), -50.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, stats = grpo_loss(logprobs, logprobs, ref, torch.zeros(2), mask, clip_ratio=0.2, kl_coef=0.5)
    per_traj = [(0.5 - math.log(0.5) - 1 + 0.0) / 2, 2 - math.log(2) - 1]
    assert stats["kl"] == pytest.approx(sum(per_traj) / 2)
    assert loss.item() == pytest.approx(0.5 * sum(per_traj) / 2)


# -- batching --------------------------------------------------------------------------------------------------


def test_collate_aligns_the_loss_mask_with_the_targets_and_pads_on_the_right():
    samples = [
        TrainSample(prompt_ids=[10, 11], response_ids=[20, 21, 22], response_mask=[1, 0, 1], advantage=1.0),
        TrainSample(prompt_ids=[12], response_ids=[23], response_mask=[1], advantage=-1.0),
    ]
    batch = collate(samples, pad_id=0, device=CPU)
    assert batch.input_ids.tolist() == [[10, 11, 20, 21, 22], [12, 23, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # position t scores token t + 1: prompt targets and padding never count, the observation 21 does not either
    assert batch.loss_mask.tolist() == [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    assert batch.rows == [4, 1]
    assert pad_rows([torch.ones(4), torch.ones(1)], 4).tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]


def test_collate_refuses_malformed_samples():
    with pytest.raises(ValueError, match="response_mask has 1 entries for 2"):
        collate([TrainSample([1], [2, 3], [1], 0.0)], pad_id=0, device=CPU)
    with pytest.raises(ValueError, match="prompt token"):
        collate([TrainSample([], [2], [1], 0.0)], pad_id=0, device=CPU)


def test_the_schedule_warms_up_linearly_then_decays_by_cosine_to_zero():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = cosine_with_warmup(optimizer, total_steps=10, warmup_ratio=0.2)
    lrs = []
    for _ in range(11):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:2] == pytest.approx([0.5, 1.0])  # warm-up over 2 updates, peak on the 2nd
    assert lrs[2] == pytest.approx(0.5 * (1 + math.cos(math.pi / 9)))
    decay = [0.5 * (1 + math.cos(math.pi * k / 9)) for k in range(1, 9)]  # zero would come at k = 9
    assert lrs[2:10] == pytest.approx(decay)
    assert lrs[9] > 0 and lrs[10] == 0.0
    assert all(a >= b for a, b in itertools.pairwise(lrs[1:]))


# -- on SmolLM2-135M and a tiny model with its vocabulary ------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """One intra-op thread: on a small shared CPU, two OpenMP threads competing with other processes run these
    passes up to ten times slower than one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smollm2():
    """The real SmolLM2-135M-Instruct, frozen; tests train deep copies of it."""
    model, tokenizer = load_policy(resolve_model(SMOLLM2, CACHE_DIR), device=CPU, dtype=torch.float32)
    model.requires_grad_(False)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny(smollm2):
    """A 2-layer, 64-wide Llama with SmolLM2's config otherwise (vocabulary, tied embeddings), randomly initialised
    from a fixed seed: the same code paths at a fraction of the CPU time, for tests that need many passes."""
    base, _ = smollm2
    shape = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    config = type(base.config).from_dict(base.config.to_dict() | shape | dict(num_key_value_heads=2, head_dim=16))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = type(base)(config)
    model.eval().requires_grad_(False)
    return model


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _rollout(tokenizer, question: str, segments: list[tuple[str, int]], advantage: float) -> TrainSample:
    messages = [{"role": "system", "content": "Search if unsure."}, {"role": "user", "content": question}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    response_ids: list[int] = []
    response_mask: list[int] = []
    for text, trained in segments:
        ids = _ids(tokenizer, text)
        response_ids += ids
        response_mask += [trained] * len(ids)
    return TrainSample(_ids(tokenizer, prompt), response_ids, response_mask, advantage)


@pytest.fixture(scope="module")
def samples(smollm2):
    """2 groups × 2 rollouts; every search is followed by an observation the loss must ignore."""
    tokenizer = smollm2[1]
    search = ("<search> Hamlet </search>", 1)
    observation = ("\n<information> Shakespeare wrote it. </information>\n", 0)
    groups = [
        ("Who wrote Hamlet?", [[search, observation, ("<answer> Shakespeare </answer><|im_end|>", 1)],
                               [search, observation, ("<answer> Marlowe </answer>", 1)]], [1.0, 0.0]),
        ("Capital of France?", [[("<answer> Paris </answer><|im_end|>", 1)],
                                [("<search> France </search>", 1), observation, ("<answer> Lyon </answer>", 1)]],
         [0.0, 1.0]),
    ]  # fmt: skip
    advantages = group_advantages([rewards for *_, rewards in groups])
    out = []
    for (question, responses, _), group_advantage in zip(groups, advantages, strict=True):
        out += [_rollout(tokenizer, question, r, a) for r, a in zip(responses, group_advantage, strict=True)]
    assert max(len(s.prompt_ids) + len(s.response_ids) for s in out) <= 64
    return out


def _config(**overrides) -> GRPOConfig:
    base = dict(group_size=2, batch_size=2, mini_batch_size=2, micro_batch_size=1, lr=1e-5, total_steps=10)
    return GRPOConfig(**(base | overrides))


def _trainable_copy(model):
    policy = copy.deepcopy(model)
    policy.requires_grad_(True)
    return policy


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def trained(smollm2, samples):
    """A full fine-tuning trainer on SmolLM2 (reference: its own deep copy) after one update, and that update."""
    base, tokenizer = smollm2
    trainer = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU, seed=3)
    return trainer, trainer.update(samples)


def test_one_update_changes_the_policy_and_leaves_the_reference_alone(smollm2, trained):
    base, _ = smollm2
    trainer, result = trained
    changed = [n for n, p in trainer.policy.named_parameters() if not torch.equal(p, base.get_parameter(n))]
    assert len(changed) == len(list(base.parameters()))
    assert trainer.ref_model is not base
    assert all(torch.equal(p, base.get_parameter(n)) for n, p in trainer.ref_model.named_parameters())
    metrics = result.metrics
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # one mini-batch: old log-probs = current policy
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6) and metrics["clip_fraction"] == 0.0
    assert metrics["lr"] == pytest.approx(1e-5) and metrics["optimizer_steps"] == 1.0  # warm-up of 1 update
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0 and math.isfinite(metrics["pg_loss"])
    assert 0 < metrics["trained_tokens"] < metrics["response_tokens"]
    assert set(result.timings) == {"old_logprobs", "ref_logprobs", "update"}
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-5 * 0.5 * (1 + math.cos(math.pi / 10)))


def _hook_logits(model):
    """Make the frozen model's embedding output a leaf that needs grad, and keep the logits with their gradient."""
    captured = {}

    def leaf(_module, _inputs, output):
        return output.detach().requires_grad_(True)

    def keep(_module, _inputs, output):
        output.retain_grad()
        captured["logits"] = output

    handles = [model.get_input_embeddings().register_forward_hook(leaf), model.lm_head.register_forward_hook(keep)]
    return captured, handles


def test_masked_observation_prompt_and_pad_positions_get_exactly_zero_gradient(smollm2, samples):
    model, _ = smollm2
    batch = collate(samples, pad_id=0, device=CPU)
    with torch.no_grad():
        current = token_logprobs(model, batch.input_ids, batch.attention_mask)
    noise = torch.randn(current.shape, generator=torch.Generator().manual_seed(0))
    old, ref = current + 0.1 * noise, current - 0.1 * noise  # ratio ≠ 1 and KL ≠ 0 everywhere, masked or not
    captured, handles = _hook_logits(model)
    try:
        loss, _ = policy_loss(model, batch, old, ref, clip_ratio=0.2, kl_coef=0.5)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    per_position = captured["logits"].grad.abs().sum(-1)  # [B, L]; position t predicts token t + 1
    untrained = torch.cat([batch.loss_mask == 0, torch.ones(len(samples), 1, dtype=torch.bool)], dim=1)
    observation_targets = (batch.loss_mask == 0) & (batch.attention_mask[:, 1:] == 1)
    assert int(observation_targets.sum()) > 4 * 20  # every prompt, and three observations
    assert per_position[untrained].max().item() == 0.0
    assert bool((per_position[~untrained] > 0).all())


def test_changing_observation_targets_leaves_the_loss_unchanged(smollm2, samples):
    model, _ = smollm2
    batch = collate(samples, pad_id=0, device=CPU)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    targets = batch.input_ids[:, 1:]
    old = logits_to_logprobs(logits, targets) + 0.1
    ref = old - 0.2

    def loss_for(new_targets):
        logprobs = logits_to_logprobs(logits, new_targets)
        return grpo_loss(logprobs, old, ref, batch.advantages, batch.loss_mask, clip_ratio=0.2, kl_coef=0.1)[0]

    shifted = (targets + 777) % logits.shape[-1]
    assert torch.equal(loss_for(torch.where(batch.loss_mask == 0, shifted, targets)), loss_for(targets))
    assert not torch.equal(loss_for(torch.where(batch.loss_mask == 1, shifted, targets)), loss_for(targets))


def test_save_then_load_restores_weights_optimizer_and_schedule_exactly(smollm2, trained, tmp_path):
    base, tokenizer = smollm2
    first, _ = trained
    first.save(tmp_path / "ckpt")
    files = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt"} <= files
    second = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU, ref_model=base, seed=99)
    second.load(tmp_path / "ckpt")
    _assert_same_trainer_state(first, second)


def _assert_same_trainer_state(first: GRPOTrainer, second: GRPOTrainer) -> None:
    for (name, a), (_, b) in zip(first.policy.named_parameters(), second.policy.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    state_a, state_b = first.optimizer.state_dict(), second.optimizer.state_dict()
    assert state_a["param_groups"] == state_b["param_groups"]
    assert state_a["state"].keys() == state_b["state"].keys()
    for key, moments in state_a["state"].items():
        for field, value in moments.items():
            assert torch.equal(value, state_b["state"][key][field]), (key, field)
    assert first.scheduler.state_dict() == second.scheduler.state_dict()
    assert torch.equal(first.generator.get_state(), second.generator.get_state())
    assert first.steps_done == second.steps_done


def test_a_resumed_trainer_continues_exactly_like_one_that_never_stopped(tiny, smollm2, samples, tmp_path):
    tokenizer = smollm2[1]
    config = _config(mini_batch_size=1, micro_batch_size=1, lr=1e-3)  # two shuffled mini-batches per step
    first = GRPOTrainer(_trainable_copy(tiny), tokenizer, config, device=CPU, seed=5)
    first.update(samples)
    first.save(tmp_path / "ckpt")
    second = GRPOTrainer(_trainable_copy(tiny), tokenizer, config, device=CPU, seed=6)
    second.load(tmp_path / "ckpt")
    _assert_same_trainer_state(first, second)
    assert first.update(samples).metrics == second.update(samples).metrics
    _assert_same_trainer_state(first, second)


def test_micro_batches_accumulate_to_the_gradient_of_one_big_batch(smollm2, samples):
    base, tokenizer = smollm2
    trainer = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU, ref_model=base)
    old = [row + 0.05 for row in trainer.logprob_rows(trainer.policy, samples)]  # ratio ≠ 1
    ref = trainer.reference_logprob_rows(samples)
    stats_big = trainer.accumulate(samples, old, ref, micro_size=4)
    big = {n: p.grad.clone() for n, p in trainer.policy.named_parameters()}
    stats = trainer.accumulate(samples, old, ref, micro_size=1)
    assert stats["pg_loss"] == pytest.approx(stats_big["pg_loss"], rel=1e-4, abs=1e-6)
    scale = max(g.abs().max().item() for g in big.values())
    assert scale > 0
    for name, param in trainer.policy.named_parameters():
        torch.testing.assert_close(param.grad, big[name], rtol=1e-3, atol=1e-5 * scale, msg=name)


def _sized(prompt: int, response: int, group: int) -> TrainSample:
    return TrainSample([group + 1] * prompt, [7] * response, [1] * response, 0.0)


@pytest.mark.parametrize(
    ("groups", "group_size", "prompt", "response", "budget"),
    [
        (4, 8, 330, 200, 1024),  # the cpu-demo's longest step: every rollout searched, turns at their budget
        (4, 5, 520, 1500, 4096),  # the paper's G = 5, long multi-turn trajectories
        (2, 3, 10, 50, 60),  # tighter than two rollouts with their prompt: one rollout per part
    ],
)
def test_a_group_over_the_token_budget_is_cut_into_parts_that_fit_and_keep_sample_order(
    groups, group_size, prompt, response, budget
):
    samples = [_sized(prompt, response, g) for g in range(groups) for _ in range(group_size)]
    passes = list(forward_passes(samples, groups * group_size, budget=budget, shared=True))
    assert [i for indices in passes for i in indices] == list(range(len(samples)))
    for indices in passes:
        prompts = {tuple(samples[i].prompt_ids) for i in indices}
        tokens = sum(len(samples[i].response_ids) for i in indices) + prompt * len(prompts)
        assert tokens <= budget
    assert len(passes) > groups  # every group was over budget, so each took more than one pass
    whole = list(forward_passes(samples, groups * group_size, budget=None, shared=True))
    assert whole == [list(range(len(samples)))]


def test_a_single_rollout_over_the_budget_still_runs_alone():
    samples = [_sized(10, 100, 0), _sized(10, 5, 0)]
    assert list(forward_passes(samples, 2, budget=50, shared=True)) == [[0], [1]]


def test_cutting_groups_into_parts_leaves_log_probs_loss_and_gradient_unchanged(smollm2, samples):
    """The shared prompt is read once per part instead of once per group; its gradient then arrives in parts."""
    base, tokenizer = smollm2
    whole = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU, ref_model=base, forward_tokens=None)
    longest_prompt = max(len(s.prompt_ids) for s in samples)
    parts = GRPOTrainer(
        _trainable_copy(base), tokenizer, _config(), device=CPU, ref_model=base, forward_tokens=longest_prompt + 30
    )
    assert len(list(forward_passes(samples, 4, budget=parts.forward_tokens, shared=True))) == len(samples)
    ref_whole, ref_parts = whole.reference_logprob_rows(samples), parts.reference_logprob_rows(samples)
    for a, b in zip(ref_whole, ref_parts, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
    old = [row + 0.05 for row in ref_whole]  # ratio ≠ 1
    stats_whole = whole.accumulate(samples, old, ref_whole, micro_size=4)
    stats_parts = parts.accumulate(samples, old, ref_whole, micro_size=4)
    assert stats_parts["pg_loss"] == pytest.approx(stats_whole["pg_loss"], rel=1e-4, abs=1e-6)
    grads = {n: p.grad for n, p in whole.policy.named_parameters()}
    scale = max(g.abs().max().item() for g in grads.values())
    assert scale > 0
    for name, param in parts.policy.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], rtol=1e-3, atol=1e-5 * scale, msg=name)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_lora_trains_only_the_adapters_against_the_adapter_free_reference(smollm2, samples, tmp_path):
    base, tokenizer = smollm2
    config = _config(use_lora=True, lora_rank=4, lr=1e-3)
    trainer = GRPOTrainer(_trainable_copy(base), tokenizer, config, device=CPU)
    assert trainer.ref_model is None
    names = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n for n in names)
    assert any("self_attn.q_proj" in n for n in names) and any("mlp.down_proj" in n for n in names)
    before = _weights(trainer.policy)
    result = trainer.update(samples[:2])
    assert result.metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start as a no-op: policy == reference
    after = _weights(trainer.policy)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and changed <= names
    reference = trainer.reference_logprob_rows(samples[:1])[0]  # rows hold the trained tokens only
    torch.testing.assert_close(reference, trainer.logprob_rows(base, samples[:1])[0])  # the adapter-free model
    batch = collate(samples[:1], pad_id=trainer.pad_id, device=CPU)
    with torch.no_grad():
        expected = token_logprobs(base, batch.input_ids, batch.attention_mask)[0][batch.loss_mask[0] != 0]
    torch.testing.assert_close(reference, expected, rtol=0.0, atol=1e-4)  # float32 head rounding: test_prefix.py
    trainer.save(tmp_path / "lora")
    restored = GRPOTrainer(_trainable_copy(base), tokenizer, config, device=CPU)
    restored.load(tmp_path / "lora")
    _assert_same_trainer_state(trainer, restored)


def test_a_policy_without_trainable_parameters_is_refused(tiny, smollm2):
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        GRPOTrainer(tiny, smollm2[1], _config(), device=CPU, ref_model=tiny)


def test_loading_a_newer_trainer_state_is_refused(tiny, smollm2):
    trainer = GRPOTrainer(_trainable_copy(tiny), smollm2[1], _config(), device=CPU, ref_model=tiny)
    with pytest.raises(ValueError, match="unsupported trainer state version 99"):
        trainer.load_state_dict(trainer.state_dict() | {"schema_version": 99})
    with pytest.raises(ValueError, match="use_lora=True"):
        trainer.load_state_dict(trainer.state_dict() | {"use_lora": True})


def test_a_bfloat16_reference_computes_in_float32_on_rounded_weights_in_half_the_memory(smollm2, samples):
    base, tokenizer = smollm2
    exact = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU)
    narrow = GRPOTrainer(_trainable_copy(base), tokenizer, _config(), device=CPU, reference_storage=torch.bfloat16)
    ref = narrow.ref_model

    def stored(model) -> int:
        return sum(p.numel() * p.element_size() for p in model.parameters())

    assert stored(ref) < 0.51 * stored(exact.ref_model)
    assert ref.get_output_embeddings().weight is ref.get_input_embeddings().weight  # the tie is kept
    assert list(ref.state_dict()) == list(base.state_dict())  # the same layers under the same names
    for name, weight in ref.named_parameters():  # each stored weight is the float32 one, rounded
        assert not weight.requires_grad and torch.equal(weight, base.get_parameter(name).to(weight.dtype)), name
    assert all(p.dtype == torch.float32 for p in narrow.policy.parameters())

    rows = narrow.reference_logprob_rows(samples)
    exact_rows = exact.reference_logprob_rows(samples)
    assert all(row.dtype == torch.float32 for row in rows)
    gaps = torch.cat([(a - b).abs() for a, b in zip(rows, exact_rows, strict=True)])
    print(f"\nbfloat16-stored reference: |Δ log p| mean {gaps.mean():.4f}, max {gaps.max():.4f} over {gaps.numel()}")
    assert 0 < gaps.mean() < 0.02 and gaps.max() < 0.15


def test_a_loss_without_kl_skips_the_reference_pass_and_trains_the_same(smollm2, tiny, samples):
    """kl_coef 0 (DAPO, Dr. GRPO as usually run): no reference forward at all, and the same loss, gradients and
    update as a trainer that computes the reference and multiplies its KL by 0."""
    _, tokenizer = smollm2
    config = _config(kl_coef=0.0, mini_batch_size=1)  # two mini-batches: old log-probs come from their own pass
    skipping = GRPOTrainer(_trainable_copy(tiny), tokenizer, config, device=CPU, seed=4)
    computing = GRPOTrainer(_trainable_copy(tiny), tokenizer, config, device=CPU, seed=4)
    calls: list[int] = []

    def counted(rows):
        calls.append(len(rows))
        return GRPOTrainer.reference_logprob_rows(skipping, rows)

    skipping.reference_logprob_rows = counted  # type: ignore[method-assign]
    computed_rows = computing.reference_logprob_rows(samples)
    computing.reference_logprob_rows = lambda rows: computed_rows  # type: ignore[method-assign]
    computing.config = GRPOConfig(**{**vars(config), "kl_coef": 1e-300})  # asks for the reference, weighs it ~0
    skipped = skipping.update(samples)
    full = computing.update(samples)
    assert calls == [] and skipped.metrics["ref_skipped"] == 1.0 and full.metrics["ref_skipped"] == 0.0
    assert skipped.metrics["kl"] == 0.0 and skipped.timings["ref_logprobs"] < 0.01
    assert math.isclose(skipped.metrics["pg_loss"], full.metrics["pg_loss"], rel_tol=1e-6, abs_tol=1e-9)
    for name, weight in skipping.policy.named_parameters():
        torch.testing.assert_close(weight, computing.policy.get_parameter(name), rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_lora_alpha_dropout_and_targets_reach_peft(smollm2, tiny):
    config = _config(use_lora=True, lora_rank=4, lora_alpha=12, lora_dropout=0.1, lora_targets=["q_proj", "v_proj"])
    trainer = GRPOTrainer(_trainable_copy(tiny), smollm2[1], config, device=CPU)
    assert trainer.peft is not None
    peft = trainer.peft.peft_config["default"]
    assert (peft.r, peft.lora_alpha, peft.lora_dropout, set(peft.target_modules)) == (4, 12, 0.1, {"q_proj", "v_proj"})
    names = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert names and all(("q_proj" in n or "v_proj" in n) and "lora_" in n for n in names)
