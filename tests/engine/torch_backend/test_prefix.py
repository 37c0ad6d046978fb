"""Shared-prefix and selective-logit training: the layouts by hand, then on SmolLM2-135M (float32, CPU) the same
log-probs, losses and gradients as the full computation — plain and LoRA, on multi-turn rollouts whose
`<information>` tokens are masked — and whole updates that leave the same weights.

Tolerances. float32: log-probs atol 1e-4, losses abs 1e-5, their statistics (means of ratios, KL, entropy) abs 1e-4,
gradients rtol 1e-4 plus atol 5e-5 × the largest gradient entry. The floor is the output head itself: a 576-term
float32 dot product per logit is off by up to 4e-5 from float64 in *either* computation (measured: the paths differ
by ≤ 3.8e-5 on log-probs, 1.7e-6 on the loss, 2e-5 × max on gradients). float64 (a tiny model with SmolLM2's
vocabulary): log-probs and loss 1e-12, gradients rtol 1e-6 plus atol 1e-8 × max — not tighter because transformers'
RMSNorm computes in float32 even in a float64 model, so the prompt's gradient, summed once (shared) or per copy
(full), rounds differently there."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch.grpo import (
    GRPOTrainer,
    collate,
    layout_logprobs,
    policy_loss,
    selective_policy_loss,
    spread_rows,
)
from inspo_engine.backends.torch.logits import split_causal_lm
from inspo_engine.backends.torch.losses import group_advantages, token_logprobs
from inspo_engine.backends.torch.model import load_policy
from inspo_engine.backends.torch.prefix import (
    Layout,
    Segments,
    padded_layout,
    shared_prefix_layout,
    takes_packed_mask,
)
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.config import GRPOConfig
from inspo_engine.models import SMOLLM2, resolve_model

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Tolerance:
    logprob: float
    loss: float
    grad_rtol: float
    grad_atol_of_max: float


FLOAT32 = Tolerance(logprob=1e-4, loss=1e-5, grad_rtol=1e-4, grad_atol_of_max=5e-5)
FLOAT64 = Tolerance(logprob=1e-12, loss=1e-12, grad_rtol=1e-6, grad_atol_of_max=1e-8)


# -- the layouts by hand ---------------------------------------------------------------------------------------


def test_the_shared_prefix_row_holds_the_prompt_once_then_each_continuation_with_restarted_positions():
    samples = [
        TrainSample([10, 11, 12], [20, 21], [1, 1], 1.0),
        TrainSample([10, 11, 12], [30, 31, 32], [1, 0, 1], -1.0),
    ]
    layout = shared_prefix_layout(samples, pad_id=0, device=CPU)
    assert layout.input_ids.tolist() == [[10, 11, 12, 20, 21, 30, 31, 32]]
    assert layout.position_ids is not None
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 4, 5]]
    # columns: prompt 0-2, first continuation 3-4, second 5-7; each sees the prompt and itself, causally
    assert layout.attention_mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0, 1, 0, 0],
        [1, 1, 1, 0, 0, 1, 1, 0],
        [1, 1, 1, 0, 0, 1, 1, 1],
    ]
    # both first tokens are predicted by the last prompt column (2); the masked 31 is not scored
    assert layout.col.tolist() == [2, 3, 2, 6]
    assert layout.row.tolist() == [0, 0, 0, 0]
    assert layout.targets.tolist() == [20, 21, 30, 32]
    assert layout.counts == [2, 2] and layout.packed


def test_different_prompts_get_rows_of_their_own_and_trained_tokens_stay_in_sample_order():
    samples = [
        TrainSample([1, 2], [5], [1], 0.0),
        TrainSample([3], [6, 7], [0, 1], 0.0),
        TrainSample([1, 2], [8, 9], [1, 1], 0.0),
    ]
    layout = shared_prefix_layout(samples, pad_id=0, device=CPU)
    assert layout.input_ids.tolist() == [[1, 2, 5, 8, 9], [3, 6, 7, 0, 0]]
    assert layout.row.tolist() == [0, 1, 0, 0]
    assert layout.col.tolist() == [1, 1, 1, 3]
    assert layout.targets.tolist() == [5, 7, 8, 9]
    assert layout.counts == [1, 1, 2]
    padding = layout.attention_mask[1, 0, 3:]  # a padding query sees only itself, and no real query sees padding
    assert padding.int().tolist() == [[0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    assert not layout.attention_mask[1, 0, :3, 3:].any()


def test_the_padded_layout_scores_response_token_k_at_column_prompt_length_minus_one_plus_k():
    samples = [TrainSample([10, 11], [20, 21, 22], [1, 0, 1], 1.0), TrainSample([12], [23], [1], -1.0)]
    layout = padded_layout(samples, pad_id=0, device=CPU)
    batch = collate(samples, pad_id=0, device=CPU)
    assert torch.equal(layout.input_ids, batch.input_ids)
    assert torch.equal(layout.attention_mask, batch.attention_mask)
    assert layout.position_ids is None and not layout.packed
    assert list(zip(layout.row.tolist(), layout.col.tolist(), strict=True)) == [(0, 1), (0, 3), (1, 0)]
    assert list(zip(*torch.nonzero(batch.loss_mask, as_tuple=True), strict=True)) == [(0, 1), (0, 3), (1, 0)]
    assert layout.targets.tolist() == [20, 22, 23]


def test_both_layouts_refuse_malformed_samples():
    for make in (padded_layout, shared_prefix_layout):
        with pytest.raises(ValueError, match="response_mask has 1 entries for 2"):
            make([TrainSample([1], [2, 3], [1], 0.0)], pad_id=0, device=CPU)
        with pytest.raises(ValueError, match="prompt token"):
            make([TrainSample([], [2], [1], 0.0)], pad_id=0, device=CPU)


def test_the_segments_of_a_packed_row_gather_the_prompt_block_then_each_continuation_of_the_longest_span():
    samples = [
        TrainSample([1, 2], [5], [1], 0.0),
        TrainSample([3], [6, 7], [0, 1], 0.0),
        TrainSample([1, 2], [8, 9], [1, 1], 0.0),
    ]
    segments = shared_prefix_layout(samples, pad_id=0, device=CPU).segments
    assert segments is not None
    assert (segments.prompt, segments.span) == (2, 2)
    # rows of width 5: [1 2 5 8 9] and [3 6 7 pad pad]; continuations (0, 2, 1), (0, 3, 2), (1, 1, 2)
    assert segments.queries.view(3, 2).tolist() == [[2, 3], [3, 4], [6, 7]]  # the first one's padding clamped
    assert segments.keys.view(3, 4).tolist() == [[0, 1, 2, 3], [0, 1, 3, 4], [5, 6, 6, 7]]
    assert segments.mask[:, 0].int().tolist() == [
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[1, 0, 1, 0], [1, 0, 1, 1]],  # row 1's prompt is one token: its second prompt column is another's
    ]
    # outputs: prompt blocks (2 rows × 2) first, then continuations (3 × 2); padding points at 0
    assert segments.source.view(2, 5).tolist() == [[0, 1, 4, 6, 7], [2, 8, 9, 0, 0]]


def _dense_attention(query, key, value, mask):
    """The reference: every query against every key of its row through the 4-D mask, keys repeated per head."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scores = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return (weights @ value).transpose(1, 2)


def test_segmented_attention_equals_the_dense_masked_attention_and_its_gradients_on_real_tokens():
    """Three rows with prompts of 7, 3 and 5 tokens and 1-3 continuations of 1-6 tokens, grouped-query heads
    (6 query heads over 2 key/value heads), in float64: the outputs of every real token and the gradients of
    query, key and value agree to rounding."""
    generator = torch.Generator().manual_seed(0)
    groups = [(7, [4, 1, 6]), (3, [2]), (5, [5, 3])]
    samples = [
        TrainSample(list(range(1 + 10 * r, 1 + 10 * r + prompt)), [99] * length, [1] * length, 0.0)
        for r, (prompt, lengths) in enumerate(groups)
        for length in lengths
    ]
    layout = shared_prefix_layout(samples, pad_id=0, device=CPU)
    assert layout.segments is not None
    rows, width = layout.input_ids.shape
    real = layout.attention_mask[:, 0].diagonal(dim1=-2, dim2=-1) & (layout.input_ids != 0)

    def inputs(heads: int) -> torch.Tensor:
        return torch.randn(rows, heads, width, 8, generator=generator, dtype=torch.float64, requires_grad=True)

    query, key, value = inputs(6), inputs(2), inputs(2)
    upstream = torch.randn(rows, width, 6, 8, generator=generator, dtype=torch.float64) * real[..., None, None]
    results = []
    for attend in (lambda: _dense_attention(query, key, value, layout.attention_mask),
                   lambda: layout.segments.attend(query, key, value, None)):  # fmt: skip
        out = attend()
        grads = torch.autograd.grad((out * upstream).sum(), (query, key, value))
        results.append((out[real], grads))
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    assert want_grads[1].abs().sum() > 0


# -- on SmolLM2-135M -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """One intra-op thread: two OpenMP threads competing with other processes on a small CPU run far slower."""
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
    """Two questions × three multi-turn rollouts (prompts of different lengths); every search is followed by an
    `<information>` observation with response_mask 0, one rollout searches twice, and one ends on an observation."""
    tokenizer = smollm2[1]

    def search(query: str) -> tuple[str, int]:
        return (f"<think> I should look it up. </think><search> {query} </search>", 1)

    def found(text: str) -> tuple[str, int]:
        return (f"\n<information> Doc 1: {text} </information>\n", 0)

    hamlet = [
        [search("Hamlet author"), found("Hamlet is a tragedy by Shakespeare."), ("<answer> Shakespeare </answer>", 1)],
        [search("Hamlet"), found("Hamlet, Prince of Denmark."), search("Hamlet writer"), found("Written c. 1600."),
         ("<answer> Marlowe </answer><|im_end|>", 1)],
        [("<answer> Shakespeare </answer><|im_end|>", 1)],
    ]  # fmt: skip
    france = [
        [("<answer> Paris </answer>", 1)],
        [search("capital of France"), found("Paris is the capital and largest city of France."),
         ("<answer> Lyon </answer>", 1)],
        [search("France capital city"), found("France's capital is Paris, on the Seine.")],
    ]  # fmt: skip
    rewards = [[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    advantages = group_advantages(rewards)
    out = [_rollout(tokenizer, "Who wrote Hamlet?", r, a) for r, a in zip(hamlet, advantages[0], strict=True)]
    question = "What is the capital city of France, the country in western Europe?"
    out += [_rollout(tokenizer, question, r, a) for r, a in zip(france, advantages[1], strict=True)]
    assert len({tuple(s.prompt_ids) for s in out}) == 2
    assert all(0 < sum(s.response_mask) < len(s.response_ids) for s in out if len(s.response_ids) > 12)
    return out


def _full_rows(model, samples) -> list[torch.Tensor]:
    """Log-probs of every sample's trained tokens by the textbook computation: the whole model, a float32
    log-softmax over the vocabulary at every position, then the positions the loss mask keeps."""
    batch = collate(samples, pad_id=0, device=CPU)
    with torch.no_grad():
        logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return [logprobs[i][batch.loss_mask[i] != 0] for i in range(len(samples))]


def _layouts(samples) -> dict[str, Layout]:
    return {
        "selective": padded_layout(samples, pad_id=0, device=CPU),
        "shared_prefix": shared_prefix_layout(samples, pad_id=0, device=CPU),
    }


def _assert_rows_close(rows: list[torch.Tensor], expected: list[torch.Tensor], tolerance: Tolerance = FLOAT32) -> None:
    assert [len(r) for r in rows] == [len(e) for e in expected]
    for row, want in zip(rows, expected, strict=True):
        assert row.dtype == want.dtype
        torch.testing.assert_close(row, want, rtol=0.0, atol=tolerance.logprob)


def test_selective_and_shared_prefix_logprobs_match_the_full_log_softmax_on_multi_turn_rollouts(smollm2, samples):
    model, _ = smollm2
    expected = _full_rows(model, samples)
    parts = split_causal_lm(model)
    assert takes_packed_mask(model)
    for name, layout in _layouts(samples).items():
        with torch.no_grad():
            flat, entropy = layout_logprobs(parts, layout)
        assert bool((entropy > 0).all()), name
        _assert_rows_close(list(torch.split(flat, layout.counts)), expected)


def test_the_trainer_stores_the_same_old_and_reference_rows_along_every_path(smollm2, samples):
    model, tokenizer = smollm2
    expected = _full_rows(model, samples)
    config = GRPOConfig(group_size=3, batch_size=2, mini_batch_size=1, micro_batch_size=1, total_steps=2)
    for path in ("full", "selective", "shared_prefix"):
        policy = copy.deepcopy(model).requires_grad_(True)
        trainer = GRPOTrainer(policy, tokenizer, config, device=CPU, ref_model=model, path=path)
        assert trainer.path == path
        _assert_rows_close(trainer.logprob_rows(trainer.policy, samples), expected)
        _assert_rows_close(trainer.reference_logprob_rows(samples), expected)


def _loss_and_grads(policy, samples, old, ref, layout: Layout | None) -> tuple[float, dict, dict]:
    """The GRPO loss of `samples` and the gradient of every trainable parameter; `layout` None = the full path."""
    for p in policy.parameters():
        p.grad = None
    advantages = torch.tensor([s.advantage for s in samples])
    options = dict(clip_ratio=0.2, kl_coef=0.5)
    if layout is None:
        batch = collate(samples, pad_id=0, device=CPU)
        loss, stats = policy_loss(
            policy, batch, spread_rows(old, batch.loss_mask), spread_rows(ref, batch.loss_mask), **options
        )
    else:
        loss, stats = selective_policy_loss(split_causal_lm(policy), layout, advantages, old, ref, **options)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}
    return loss.item(), stats, grads


def _noisy_rows(rows: list[torch.Tensor], seed: int, scale: float) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [row + scale * torch.randn(row.shape, generator=generator, dtype=row.dtype) for row in rows]


def _assert_same_loss_and_grads(policy, samples, tolerance: Tolerance = FLOAT32) -> None:
    current = _full_rows(policy, samples)
    old, ref = _noisy_rows(current, 1, 0.3), _noisy_rows(current, 2, 0.3)  # some ratios clip, KL ≠ 0
    loss, stats, grads = _loss_and_grads(policy, samples, old, ref, None)
    assert 0 < stats["clip_fraction"] < 1 and stats["kl"] > 0
    scale = max(g.abs().max().item() for g in grads.values())
    assert scale > 0
    for name, layout in _layouts(samples).items():
        other_loss, other_stats, other_grads = _loss_and_grads(policy, samples, old, ref, layout)
        assert other_loss == pytest.approx(loss, rel=0.0, abs=tolerance.loss), name
        assert other_stats == pytest.approx(stats, rel=0.0, abs=tolerance.logprob), name  # per-token means
        assert other_grads.keys() == grads.keys()
        for key, grad in grads.items():
            atol = tolerance.grad_atol_of_max * scale
            torch.testing.assert_close(
                other_grads[key], grad, rtol=tolerance.grad_rtol, atol=atol, msg=f"{name}: {key}"
            )


def test_selective_and_shared_prefix_losses_and_gradients_match_the_full_path(smollm2, samples):
    policy = copy.deepcopy(smollm2[0]).requires_grad_(True)
    _assert_same_loss_and_grads(policy, samples)


def test_in_float64_the_paths_agree_to_rounding_so_they_compute_the_same_function(smollm2, samples):
    policy = _tiny(smollm2[0]).double().requires_grad_(True)
    expected = _full_rows(policy, samples)
    assert expected[0].dtype == torch.float64
    for layout in _layouts(samples).values():
        with torch.no_grad():
            flat, _ = layout_logprobs(split_causal_lm(policy), layout)
        _assert_rows_close(list(torch.split(flat, layout.counts)), expected, FLOAT64)
    _assert_same_loss_and_grads(policy, samples, FLOAT64)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_with_lora_the_paths_agree_and_the_reference_is_the_adapter_free_model(smollm2, samples):
    model, tokenizer = smollm2
    config = GRPOConfig(group_size=3, batch_size=2, mini_batch_size=2, micro_batch_size=2, use_lora=True, lora_rank=4)
    trainer = GRPOTrainer(copy.deepcopy(model), tokenizer, config, device=CPU)
    assert trainer.path == "shared_prefix"
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # adapters that are not a no-op, so the adapted forward and both A and B get gradient
        for name, param in trainer.policy.named_parameters():
            if "lora_B" in name:
                param.copy_(0.02 * torch.randn(param.shape, generator=generator))
    _assert_rows_close(trainer.reference_logprob_rows(samples), _full_rows(model, samples))
    adapted = _full_rows(trainer.policy, samples)
    assert max((a - b).abs().max().item() for a, b in zip(adapted, _full_rows(model, samples), strict=True)) > 1e-3
    _assert_rows_close(trainer.logprob_rows(trainer.policy, samples), adapted)
    _assert_same_loss_and_grads(trainer.policy, samples)


# -- whole updates and the fallback, on tiny random models with SmolLM2's vocabulary ---------------------------


def _tiny(base, model_type: str = "llama"):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        if model_type == "llama":
            shape = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4)
            config = type(base.config).from_dict(
                base.config.to_dict() | shape | dict(num_key_value_heads=2, head_dim=16)
            )
            return type(base)(config).eval()
        from transformers import GPTNeoConfig, GPTNeoForCausalLM

        config = GPTNeoConfig(vocab_size=base.config.vocab_size, hidden_size=64, num_layers=2, num_heads=4,
                              attention_types=[[["global"], 2]], max_position_embeddings=256)  # fmt: skip
        return GPTNeoForCausalLM(config).eval()


def test_a_whole_update_leaves_the_same_weights_and_metrics_along_every_path(smollm2, samples):
    base, tokenizer = smollm2
    config = GRPOConfig(group_size=3, batch_size=2, mini_batch_size=1, micro_batch_size=1, lr=1e-3, total_steps=4)
    tiny = _tiny(base)
    results = {}
    for path in ("full", "selective", "shared_prefix"):
        trainer = GRPOTrainer(
            copy.deepcopy(tiny).requires_grad_(True), tokenizer, config, device=CPU, seed=7, path=path
        )
        metrics = [trainer.update(samples).metrics for _ in range(2)]  # two mini-batches a step: old log-probs too
        results[path] = metrics, {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    full_metrics, full_weights = results["full"]
    assert full_metrics[0]["optimizer_steps"] == 2.0 and full_metrics[1]["ratio_mean"] != 1.0
    for path in ("selective", "shared_prefix"):
        metrics, weights = results[path]
        for got, want in zip(metrics, full_metrics, strict=True):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6), path
        for name, weight in full_weights.items():
            # four AdamW steps of lr 1e-3 move entries by up to 3e-3; Adam divides by √v, so an entry whose gradient
            # is nearly zero turns rounding into a visible step: 1e-5 is 0.3 % of the distance moved
            torch.testing.assert_close(weights[name], weight, rtol=1e-5, atol=1e-5, msg=f"{path}: {name}")


def test_a_model_whose_attention_cannot_take_a_4d_mask_falls_back_to_the_selective_path(smollm2, samples):
    base, tokenizer = smollm2
    neo = _tiny(base, "gpt_neo")
    config = GRPOConfig(group_size=3, batch_size=2, mini_batch_size=2, micro_batch_size=2, total_steps=2)
    trainer = GRPOTrainer(copy.deepcopy(neo).requires_grad_(True), tokenizer, config, device=CPU, ref_model=neo)
    assert trainer.path == "selective"
    _assert_rows_close(trainer.reference_logprob_rows(samples), _full_rows(neo, samples))
    assert trainer.update(samples).metrics["optimizer_steps"] == 1.0


def test_the_trainer_attends_segment_by_segment_in_the_forward_and_in_the_recomputing_backward(
    smollm2, samples, monkeypatch
):
    """The layout's segments reach every attention call of an update — forward, and the checkpointed blocks'
    recomputation in backward — so no block falls back to the dense masked square."""
    base, tokenizer = smollm2
    tiny = _tiny(base)
    calls = {"segments": 0}
    attend = Segments.attend

    def counted(self, *args):
        calls["segments"] += 1
        return attend(self, *args)

    monkeypatch.setattr(Segments, "attend", counted)
    config = GRPOConfig(group_size=3, batch_size=2, mini_batch_size=2, micro_batch_size=2, total_steps=2)
    trainer = GRPOTrainer(copy.deepcopy(tiny).requires_grad_(True), tokenizer, config, device=CPU, ref_model=tiny)
    assert trainer.path == "shared_prefix" and trainer.checkpoint_layers
    layers = tiny.config.num_hidden_layers
    trainer.reference_logprob_rows(samples)
    assert calls["segments"] == layers  # one packed pass (two rows) through each block
    trainer.update(samples)
    # the update: its reference pass, its forward with gradient, then each block again in backward
    assert calls["segments"] == layers + 3 * layers
