"""Drawing the next token from logits: inverse-CDF sampling in two levels with one uniform number per row, within
the top-p nucleus; it knows logits and generators, nothing about rows, turns or the cache."""

from __future__ import annotations

import torch

SAMPLE_BLOCK = 256
"""Tokens per block of the two-level inverse-CDF sampler (`sample_tokens`)."""


def sample_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), restricted to the top-p nucleus when top_p < 1.

    Inverse-CDF sampling with one uniform number per row (torch.multinomial draws one per vocabulary entry, about
    15 % of a CPU decode step at batch 40), in two levels so that no full-vocabulary cumulative sum is made (that
    float64 cumsum was another 5–10 %): the draw picks a block of `SAMPLE_BLOCK` tokens from the blocks' summed
    weights, then a token inside that block. The weights are exp(logit − max) in float32 (the softmax's own
    precision), summed per block in float32; the cumulative sums and the draw are float64. A token of zero weight
    (outside the nucleus) is never chosen.
    """
    if temperature != 1.0:
        logits = logits / temperature
    if top_p < 1.0:
        logits = _nucleus(logits, top_p)
    rows, vocab = logits.shape
    blocks = -(-vocab // SAMPLE_BLOCK)
    weights = logits.new_empty((rows, blocks * SAMPLE_BLOCK))
    weights[:, vocab:] = 0.0
    torch.sub(logits, logits.amax(dim=-1, keepdim=True), out=weights[:, :vocab]).exp_()
    weights = weights.view(rows, blocks, SAMPLE_BLOCK)
    block_cdf = weights.sum(dim=-1).double().cumsum_(dim=-1)
    draws = torch.rand(rows, 1, generator=generator, dtype=torch.float64, device=_device_of(generator, logits))
    draws = draws.to(logits.device) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, draws, right=True).minimum(_last_rise(block_cdf))
    before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp(min=0)), 0.0)
    inner = weights[torch.arange(rows, device=logits.device), block.squeeze(1)].double().cumsum_(dim=-1)
    chosen = torch.searchsorted(inner, draws - before, right=True).minimum(_last_rise(inner))
    return (block * SAMPLE_BLOCK + chosen).squeeze(1)


def _last_rise(cdf: torch.Tensor) -> torch.Tensor:
    """Per row, the last index where the cumulative sum grows: the last entry of positive weight. A draw that
    rounding put at or past the total lands there instead of on a zero-weight entry."""
    return (cdf < cdf[:, -1:]).sum(dim=-1, keepdim=True)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """`logits` with every token outside the top-p nucleus set to −inf (the most likely token always stays)."""
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    outside = probs.cumsum(dim=-1) - probs > top_p
    ordered = ordered.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)


def _device_of(generator: torch.Generator | None, tensor: torch.Tensor) -> torch.device:
    """Where random numbers are drawn: the generator's device (a CPU generator can drive a GPU rollout)."""
    return generator.device if generator is not None else tensor.device
