"""Log-probs and entropies of chosen target tokens from a causal LM's hidden states, with the output head applied
only to the rows asked for, a chunk of rows at a time, and the decoder's layers checkpointed; it knows models and
tensors, nothing about samples or losses.

A full-vocabulary float32 log-softmax over every position of a batch is what made a GRPO step on a 49k-vocabulary
model need gigabytes: here log π(target) = logit[target] − logsumexp(logits), computed for at most
`LOGIT_CHUNK_ROWS` rows at once. With gradient, each chunk's logits are recomputed in the backward pass
(activation checkpointing) instead of being kept, so a chunk's logits are the most that ever exists.

`layer_checkpointing` does for the decoder what chunking does for the head: each transformer block keeps only its
input for backward and recomputes its activations there (about one more forward pass), so a training pass holds one
hidden state per layer and token instead of every intermediate (≈ 20× less for SmolLM2).

Supported models: transformers causal LMs whose logits are the output head applied to the decoder's last hidden
state (Llama, Qwen2, Mistral, SmolLM2, …; not models with final logit soft-capping), plain or wrapped by peft.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer

from .precision import current_region

LOGIT_CHUNK_ROWS = 256
"""Most rows whose full-vocabulary logits exist at once (256 × 49,152 float32 ≈ 50 MB for SmolLM2). The backward
pass of a chunk holds a few tensors of that size (the recomputed logits, the softmax, the scattered target
gradient); halving the chunk from 512 rows lowered a 2-step cpu-demo's peak by 33 MB only (Benchmarks, memory)."""


_INTO_GRAD = [False]
"""Whether `target_logprobs` passes made now add the head's weight gradient straight into `.grad` (see
`head_gradient_into_grad`)."""


@contextmanager
def head_gradient_into_grad() -> Iterator[None]:
    """While inside, the passes `target_logprobs` makes through a bias-free linear head whose weight is a leaf add
    that weight's gradient straight into its `.grad` in backward instead of handing it to autograd, as Megatron-LM's
    gradient-accumulation fusion does. For a head tied to the input embedding (SmolLM2, Qwen2.5-3B) autograd would
    otherwise hold the head's gradient, the embedding's and their out-of-place sum at once (3 × 113 MB for
    SmolLM2) before adding them to `.grad`. Only for callers that run `backward()`: `torch.autograd.grad` would not
    see that part of the weight's gradient. The choice is made when the pass runs forward."""
    previous = _INTO_GRAD[0]
    _INTO_GRAD[0] = True
    try:
        yield
    finally:
        _INTO_GRAD[0] = previous


@dataclass(frozen=True)
class CausalLMParts:
    """A causal LM split where the loss needs it: the network up to the last hidden state, and the output head."""

    lm: PreTrainedModel
    """The whole transformers model (in LoRA mode the network peft injected its adapters into)."""
    decoder: nn.Module
    """Token ids → `last_hidden_state` [batch, length, hidden]."""
    head: nn.Module
    """Hidden states [..., hidden] → logits [..., vocabulary]."""


def causal_lm(model: nn.Module) -> PreTrainedModel:
    """The transformers causal LM inside `model`: `model` itself, or the one a peft wrapper put its adapters into.

    peft injects LoRA layers in place, so running that model's parts runs the adapters, and peft's
    `disable_adapter()` switches them off there too.
    """
    if isinstance(model, PreTrainedModel):
        return model
    from peft import PeftModel  # imported only when LoRA is on: it adds seconds to every import of the backend

    if isinstance(model, PeftModel):
        base = model.get_base_model()
        if isinstance(base, PreTrainedModel):
            return base
    raise TypeError(f"expected a transformers causal LM or a peft wrapper of one, got {type(model).__name__}")


def split_causal_lm(model: nn.Module) -> CausalLMParts:
    """`model`'s decoder and output head (see `causal_lm` for peft-wrapped models)."""
    lm = causal_lm(model)
    head = lm.get_output_embeddings()  # type: ignore[no-untyped-call]  # transformers leaves these untyped
    decoder = lm.get_decoder()  # type: ignore[no-untyped-call]
    if not isinstance(head, nn.Module) or not isinstance(decoder, nn.Module):
        raise TypeError(f"{type(lm).__name__} has no separate decoder and output head")
    return CausalLMParts(lm=lm, decoder=decoder, head=head)


def target_logprobs(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, *, chunk_rows: int = LOGIT_CHUNK_ROWS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(target), entropy) of each row: `hidden` [N, hidden] are the states that predict `targets` [N].

    Log-probs are float32 (float64 for a float64 model) and carry gradient into `hidden` (and the head's weights)
    when grad is on; entropies never do. With gradient, each chunk's logits are recomputed during backward rather
    than stored.
    """
    track = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    if track and type(head) is nn.Linear and head.bias is None:
        pair = _LinearHeadLogprobs.apply(hidden, head.weight, targets, head, chunk_rows)
        assert isinstance(pair, tuple)
        return pair[0], pair[1]
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, max(hidden.shape[0], 1), chunk_rows):  # no rows: one empty chunk, still in the graph
        rows, wanted = hidden[start : start + chunk_rows], targets[start : start + chunk_rows]
        if track:
            pair = checkpoint(_ForwardEntropy(), head, rows, wanted, use_reentrant=False)
            assert isinstance(pair, tuple)
            logprob, entropy = pair
        else:
            logprob, entropy = _chunk_logprobs(head, rows, wanted)
        logprobs.append(logprob)
        entropies.append(entropy)
    return torch.cat(logprobs), torch.cat(entropies)


def at_least_float32(values: torch.Tensor) -> torch.Tensor:
    """`values` in float32, or as they are when already wider (float64, for exactness checks)."""
    return values.to(torch.promote_types(values.dtype, torch.float32))


def _chunk_logprobs(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, *, entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(target), entropy) of each row; `entropy` False leaves the second empty."""
    logits = at_least_float32(head(hidden))
    normaliser = torch.logsumexp(logits, dim=-1)
    logprob = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
    if not entropy:
        return logprob, logprob.new_empty(0)
    with torch.no_grad():
        expected_logit = torch.softmax(logits, dim=-1).mul_(logits).sum(-1)
        return logprob, normaliser - expected_logit


class _LinearHeadLogprobs(torch.autograd.Function):
    """`target_logprobs` with gradient through a bias-free linear head, written out so that backward holds one
    chunk's logits and one gradient of the head's weights for all chunks.

    Checkpointing each chunk through autograd gave every chunk's backward its own full-size weight gradient
    (vocabulary × hidden, 113 MB for SmolLM2), summed out of place with the others: several of those, beside the
    recomputed logits, their softmax and the scattered target gradient, were alive at once. Here backward
    recomputes a chunk's logits, turns them in place into the gradient of the log-probs with respect to the
    logits (g · (onehot(target) − softmax)), and adds that chunk's share into one weight gradient with `addmm_`.
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        head: nn.Module,
        chunk_rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logprobs, entropies, normalisers = [], [], []
        for start in range(0, max(hidden.shape[0], 1), chunk_rows):
            rows, wanted = hidden[start : start + chunk_rows], targets[start : start + chunk_rows]
            logits = at_least_float32(head(rows))
            normaliser = torch.logsumexp(logits, dim=-1)
            logprobs.append(logits.gather(-1, wanted.unsqueeze(-1)).squeeze(-1) - normaliser)
            entropies.append(normaliser - torch.softmax(logits, dim=-1).mul_(logits).sum(-1))
            normalisers.append(normaliser)
        ctx.save_for_backward(hidden, weight, targets, torch.cat(normalisers))
        ctx.head, ctx.chunk_rows, ctx.into_grad = head, chunk_rows, _INTO_GRAD[0]  # type: ignore[attr-defined]
        ctx.region = current_region(hidden.device.type)  # type: ignore[attr-defined]
        entropy = torch.cat(entropies)
        ctx.mark_non_differentiable(entropy)
        return torch.cat(logprobs), entropy

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_logprobs: torch.Tensor, _grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, targets, normalisers = ctx.saved_tensors  # type: ignore[attr-defined]
        want_hidden, want_weight = ctx.needs_input_grad[:2]  # type: ignore[attr-defined]
        chunk_rows: int = ctx.chunk_rows  # type: ignore[attr-defined]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        parameter: torch.Tensor = ctx.head.weight  # type: ignore[attr-defined]
        into_grad = want_weight and ctx.into_grad and parameter.is_leaf  # type: ignore[attr-defined]
        grad_weight = None
        if into_grad:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            grad_weight = parameter.grad
        elif want_weight:
            grad_weight = torch.zeros_like(weight)
        autocast, autocast_dtype = ctx.region  # type: ignore[attr-defined]
        compute = autocast_dtype if autocast else weight.dtype
        narrow = weight.to(compute)  # under autocast the products read bfloat16, as in forward
        for start in range(0, hidden.shape[0], chunk_rows):
            stop = start + chunk_rows
            rows, wanted, scale = hidden[start:stop], targets[start:stop], grad_logprobs[start:stop]
            with torch.no_grad(), torch.autocast(hidden.device.type, dtype=autocast_dtype, enabled=autocast):
                grad_logits = at_least_float32(ctx.head(rows))  # type: ignore[attr-defined]
            grad_logits.sub_(normalisers[start:stop, None]).exp_().mul_(-scale[:, None].to(grad_logits.dtype))
            grad_logits.scatter_add_(-1, wanted[:, None], scale[:, None].to(grad_logits.dtype))
            grad_logits = grad_logits.to(compute)
            if compute != weight.dtype:  # mixed precision: bfloat16 products, added into float32 gradients
                if grad_hidden is not None:
                    grad_hidden[start:stop] = torch.mm(grad_logits, narrow)
                if grad_weight is not None:
                    grad_weight.add_(torch.mm(grad_logits.T, rows.to(compute)))
                continue
            if grad_hidden is not None:
                torch.mm(grad_logits, weight, out=grad_hidden[start:stop])
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.T, rows)
        return grad_hidden, None if into_grad else grad_weight, None, None, None


class _ForwardEntropy:
    """`_chunk_logprobs` for activation checkpointing: the entropy (no gradient, only logged) is computed in the
    forward pass and skipped when backward recomputes the chunk, where only the tensors autograd saves matter."""

    def __init__(self) -> None:
        self.recomputing = False

    def __call__(self, head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        entropy = not self.recomputing
        self.recomputing = True
        return _chunk_logprobs(head, hidden, targets, entropy=entropy)


@contextmanager
def layer_checkpointing(decoder: nn.Module) -> Iterator[int]:
    """While inside, every repeated block of `decoder` (transformers' `GradientCheckpointingLayer`) is run through
    non-reentrant activation checkpointing; yields how many blocks that is (0: the model has none, nothing changes).

    The blocks stay in eval mode (no dropout), unlike transformers' own switch, which needs train mode. Run the
    backward pass inside too, under the same attention implementation as the forward: it recomputes the blocks.
    """
    layers = [module for module in decoder.modules() if isinstance(module, GradientCheckpointingLayer)]
    for layer in layers:  # an instance attribute shadows the class's forward until it is removed again
        layer.__dict__["forward"] = functools.partial(checkpoint, layer.forward, use_reentrant=False)
    try:
        yield len(layers)
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
