"""Selective logits: log-probs and entropies from chosen hidden states, a chunk of rows at a time, equal to the
full-vocabulary log-softmax; and the decoder/head split of plain and LoRA-wrapped models."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from inspo_engine.backends.torch.logits import (
    causal_lm,
    head_gradient_into_grad,
    split_causal_lm,
    target_logprobs,
)

VOCAB = 1000


@pytest.fixture
def head() -> nn.Linear:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Linear(32, VOCAB, bias=False)


def _rows(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, 32, generator=generator) * 3
    return hidden, torch.randint(0, VOCAB, (n,), generator=generator)


def _reference(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logprobs = torch.log_softmax(head(hidden).float(), dim=-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logprobs.gather(-1, targets[:, None]).squeeze(-1), entropy


def test_log_probs_and_entropies_equal_the_full_log_softmax_at_any_chunk_size(head):
    hidden, targets = _rows(20)
    want_logprobs, want_entropy = _reference(head, hidden, targets)
    for chunk_rows in (1, 7, 20, 512):
        with torch.no_grad():
            logprobs, entropy = target_logprobs(head, hidden, targets, chunk_rows=chunk_rows)
        torch.testing.assert_close(logprobs, want_logprobs, rtol=0.0, atol=1e-5)
        torch.testing.assert_close(entropy, want_entropy, rtol=0.0, atol=1e-4)


def test_gradients_into_the_hidden_states_and_the_head_equal_the_full_computation(head):
    hidden, targets = _rows(20)
    weights = torch.randn(20, generator=torch.Generator().manual_seed(2))
    leaf = hidden.clone().requires_grad_(True)
    (_reference(head, leaf, targets)[0] * weights).sum().backward()
    want_hidden, want_head = leaf.grad.clone(), head.weight.grad.clone()
    head.weight.grad, leaf.grad = None, None
    logprobs, entropy = target_logprobs(head, leaf, targets, chunk_rows=7)
    assert logprobs.requires_grad and not entropy.requires_grad
    torch.testing.assert_close(entropy, _reference(head, hidden, targets)[1], rtol=0.0, atol=1e-4)
    (logprobs * weights).sum().backward()
    torch.testing.assert_close(leaf.grad, want_hidden, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(head.weight.grad, want_head, rtol=1e-5, atol=1e-6)


def test_the_head_never_sees_more_than_a_chunk_of_rows_and_reruns_each_chunk_once_in_backward(head):
    hidden, targets = _rows(20)
    seen: list[int] = []
    handle = head.register_forward_hook(lambda _module, inputs, _output: seen.append(inputs[0].shape[0]))
    try:
        logprobs, _ = target_logprobs(head, hidden.requires_grad_(True), targets, chunk_rows=8)
        assert seen == [8, 8, 4]
        logprobs.sum().backward()
    finally:
        handle.remove()
    assert sorted(seen) == sorted([8, 8, 4] * 2)  # the logits were recomputed, not kept


def test_backward_recomputes_the_log_probs_but_not_the_logged_entropy(head, monkeypatch):
    """The entropy has no gradient: recomputing it in backward would only add a softmax the size of the chunk's
    logits to the peak memory."""
    softmaxes: list[int] = []
    softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda x, *a, **k: softmaxes.append(x.shape[0]) or softmax(x, *a, **k))
    hidden, targets = _rows(20)
    logprobs, _ = target_logprobs(head, hidden.requires_grad_(True), targets, chunk_rows=8)
    assert softmaxes == [8, 8, 4]
    logprobs.sum().backward()
    assert softmaxes == [8, 8, 4]


class _WeightSized(TorchDispatchMode):
    """Counts the new tensors of the head weight's shape that the ops run inside it allocate (not views of, or
    in-place results in, a tensor they were given)."""

    def __init__(self) -> None:
        super().__init__()
        self.made = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr() for t in given}
        if isinstance(out, torch.Tensor) and out.shape == (VOCAB, 32):
            self.made += out.untyped_storage().data_ptr() not in storages
        return out


def test_backward_makes_one_gradient_of_the_heads_weights_for_all_chunks(head):
    """Each chunk's own weight gradient, summed out of place with the others, was the largest transient of a
    cpu-demo update (113 MB apiece for SmolLM2): all chunks now add into one."""
    hidden, targets = _rows(20)
    logprobs, _ = target_logprobs(head, hidden.requires_grad_(True), targets, chunk_rows=4)
    with _WeightSized() as counter:
        logprobs.sum().backward()
    assert counter.made == 1
    assert head.weight.grad is not None


def test_a_tied_head_and_embedding_get_the_gradient_of_both_uses():
    model = _tiny_llama()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    targets = ids[:, 1:].reshape(-1)
    logits = model(input_ids=ids).logits[:, :-1].reshape(-1, VOCAB)
    torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum().backward()
    want = model.get_input_embeddings().weight.grad.clone()
    model.zero_grad(set_to_none=True)
    parts = split_causal_lm(model)
    hidden = parts.decoder(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, 32)
    target_logprobs(parts.head, hidden, targets, chunk_rows=5)[0].sum().backward()
    assert parts.head.weight is model.get_input_embeddings().weight
    torch.testing.assert_close(model.get_input_embeddings().weight.grad, want, rtol=1e-5, atol=1e-6)


def test_inside_head_gradient_into_grad_backward_adds_the_heads_gradient_into_grad_and_allocates_once(head):
    """Two passes, as gradient accumulation makes them: the weight's `.grad` is the sum of both, made by the first
    pass and added into in place by the second, and autograd is handed no gradient of the weight at all."""
    hidden, targets = _rows(20)
    weights = torch.randn(20, generator=torch.Generator().manual_seed(2))
    (_reference(head, hidden, targets)[0] * weights).sum().backward()
    want = 2 * head.weight.grad
    head.weight.grad = None
    made = []
    with head_gradient_into_grad():
        for _ in range(2):
            logprobs, _ = target_logprobs(head, hidden.clone().requires_grad_(True), targets, chunk_rows=6)
            with _WeightSized() as counter:
                (logprobs * weights).sum().backward()
            made.append(counter.made)
    assert made == [1, 0]
    torch.testing.assert_close(head.weight.grad, want, rtol=1e-5, atol=1e-6)


def test_a_tied_head_and_embedding_get_both_gradients_when_the_heads_goes_straight_into_grad():
    model = _tiny_llama()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    targets = ids[:, 1:].reshape(-1)
    logits = model(input_ids=ids).logits[:, :-1].reshape(-1, VOCAB)
    torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum().backward()
    want = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    parts = split_causal_lm(model)
    with head_gradient_into_grad():
        hidden = parts.decoder(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, 32)
        target_logprobs(parts.head, hidden, targets, chunk_rows=5)[0].sum().backward()
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, want[name], rtol=1e-5, atol=1e-6)


def test_no_rows_give_empty_results_that_still_backpropagate(head):
    hidden = torch.zeros(0, 32, requires_grad=True)
    logprobs, entropy = target_logprobs(head, hidden, torch.zeros(0, dtype=torch.long))
    assert logprobs.shape == entropy.shape == (0,)
    logprobs.sum().backward()
    assert hidden.grad is not None and hidden.grad.shape == (0, 32)


# -- splitting a causal LM -------------------------------------------------------------------------------------


def _tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


def _split_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    parts = split_causal_lm(model)
    return parts.head(parts.decoder(input_ids=ids).last_hidden_state)


def test_the_decoder_then_the_head_give_the_models_own_logits():
    model = _tiny_llama()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(_split_logits(model, ids), model(input_ids=ids).logits, rtol=0.0, atol=0.0)
    assert split_causal_lm(model).head is model.lm_head


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_a_lora_wrapped_model_splits_into_its_adapted_decoder_and_the_disabled_adapters_still_apply():
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(_tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    assert causal_lm(wrapped) is wrapped.get_base_model()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        adapted = wrapped(input_ids=ids).logits
        torch.testing.assert_close(_split_logits(wrapped, ids), adapted, rtol=0.0, atol=0.0)
        with wrapped.disable_adapter():
            plain = wrapped(input_ids=ids).logits
            torch.testing.assert_close(_split_logits(wrapped, ids), plain, rtol=0.0, atol=0.0)
    assert (adapted - plain).abs().max() > 1e-3


def test_a_module_that_is_not_a_causal_lm_is_refused():
    with pytest.raises(TypeError, match="expected a transformers causal LM"):
        split_causal_lm(nn.Linear(2, 2))
