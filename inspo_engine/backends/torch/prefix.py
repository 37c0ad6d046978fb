"""How training samples are laid out for one forward pass, and where each trained token's prediction sits in it; it
knows token ids, masks and attention, nothing about log-probs, losses or rewards.

Two layouts, both listing the trained tokens (response_mask 1) in sample order, then token order:

- `padded_layout`: one right-padded row per sample (prompt + response), the model's own attention and a 2-D mask.
- `shared_prefix_layout`: one row per distinct prompt — the G rollouts of a question — holding the prompt once and
  then every continuation, each behind a 4-D boolean mask that lets it see the prompt and itself (causally) but not
  its siblings, with position ids restarting after the prompt. The prompt is read once per group, and in training
  its gradient is accumulated once from all G continuations: the idea of Prefix Grouper (arXiv 2506.05433). The
  last prompt position predicts the first token of every continuation, so its hidden state is used G times.

The shared-prefix layout runs the model with the grouped attention of `kvcache` (`GROUPED_SDPA`), which takes a
4-D boolean mask; `takes_packed_mask` tells whether a model can switch to it. The layout also carries its `Segments`,
which the grouped attention uses instead of the mask: a dense masked attention over a row computes every query
against every key, (prompt + G continuations)² scores of which a continuation needs only (prompt + itself) per query.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from .kvcache import GROUPED_SDPA
from .samples import TrainSample


@dataclass
class Layout:
    """Model inputs for some samples plus, for every trained token, the (row, column) of the hidden state that
    predicts it."""

    input_ids: torch.Tensor
    """[rows, width] token ids, padded on the right."""
    attention_mask: torch.Tensor
    """[rows, width] 1 on real tokens (padded), or [rows, 1, width, width] bool, True = may attend (shared)."""
    position_ids: torch.Tensor | None
    """[rows, width], or None for the model's default 0, 1, 2, …"""
    row: torch.Tensor
    """[N] row of the hidden state predicting each trained token."""
    col: torch.Tensor
    """[N] its column."""
    targets: torch.Tensor
    """[N] the trained token ids."""
    counts: list[int]
    """Trained tokens of each sample, in sample order (they sum to N)."""
    segments: Segments | None = None
    """Where the prompt and each continuation of a packed row sit (shared-prefix layout)."""

    def model_inputs(self) -> dict[str, Any]:
        """The keyword arguments of a decoder forward over these rows (`segments` reaches the attention)."""
        inputs: dict[str, Any] = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }
        if self.segments is not None:
            inputs["segments"] = self.segments
        return inputs

    @property
    def packed(self) -> bool:
        """Whether the rows need the 4-D mask (and so the grouped attention)."""
        return self.attention_mask.dim() == 4


def check_sample(sample: TrainSample) -> None:
    """Refuse samples the layouts cannot represent: no prompt, or a response mask that does not match."""
    if not sample.prompt_ids:
        raise ValueError("a training sample needs at least one prompt token")
    if len(sample.response_mask) != len(sample.response_ids):
        raise ValueError(
            f"response_mask has {len(sample.response_mask)} entries for {len(sample.response_ids)} response tokens"
        )
    if any(m not in (0, 1) for m in sample.response_mask):
        raise ValueError("response_mask entries must be 0 or 1")


def trained_positions(sample: TrainSample) -> list[int]:
    """Indices k into the response of the tokens the loss trains (response_mask 1)."""
    return [k for k, m in enumerate(sample.response_mask) if m]


# -- one row per sample ----------------------------------------------------------------------------------------


def padded_layout(samples: Sequence[TrainSample], *, pad_id: int, device: torch.device) -> Layout:
    """One right-padded row per sample; response token k of row i is predicted at column len(prompt) − 1 + k."""
    for sample in samples:
        check_sample(sample)
    sequences = [s.prompt_ids + s.response_ids for s in samples]
    input_ids, real = _pad(sequences, pad_id)
    row: list[int] = []
    col: list[int] = []
    targets: list[int] = []
    counts: list[int] = []
    for i, sample in enumerate(samples):
        trained = trained_positions(sample)
        row += [i] * len(trained)
        col += [len(sample.prompt_ids) - 1 + k for k in trained]
        targets += [sample.response_ids[k] for k in trained]
        counts.append(len(trained))
    return Layout(
        input_ids.to(device), real.long().to(device), None, *_indices(row, col, targets, device), counts=counts
    )


# -- one row per shared prompt ---------------------------------------------------------------------------------


def shared_prefix_layout(samples: Sequence[TrainSample], *, pad_id: int, device: torch.device) -> Layout:
    """One row per distinct prompt (in order of first appearance): the prompt, then each of its samples' responses.

    Response token 0 of every continuation is predicted by the prompt's last column; token k > 0 by the column of
    token k − 1 of the same continuation.
    """
    for sample in samples:
        check_sample(sample)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, sample in enumerate(samples):
        groups.setdefault(tuple(sample.prompt_ids), []).append(i)
    sequences: list[list[int]] = []
    segments: list[list[int]] = []
    positions: list[list[int]] = []
    place: dict[int, tuple[int, int]] = {}  # sample → (row, column of its first response token)
    spans: list[tuple[int, int, int]] = []  # (row, start, length) of every continuation
    for row, (prompt, members) in enumerate(groups.items()):
        ids, segment, position = list(prompt), [0] * len(prompt), list(range(len(prompt)))
        for number, i in enumerate(members, start=1):
            response = samples[i].response_ids
            place[i] = (row, len(ids))
            spans.append((row, len(ids), len(response)))
            ids += response
            segment += [number] * len(response)
            position += range(len(prompt), len(prompt) + len(response))
        sequences.append(ids)
        segments.append(segment)
        positions.append(position)
    input_ids, real = _pad(sequences, pad_id)
    mask = _segment_mask(segments, real, input_ids.shape[1])
    prompt_lengths = [len(prompt) for prompt in groups]
    return Layout(
        input_ids.to(device),
        mask.to(device),
        _pad(positions, 0)[0].to(device),
        *_indices(*_shared_targets(samples, place), device),
        counts=[len(trained_positions(s)) for s in samples],
        segments=Segments.plan(prompt_lengths, spans, input_ids.shape[1], device),
    )


def _shared_targets(
    samples: Sequence[TrainSample], place: dict[int, tuple[int, int]]
) -> tuple[list[int], list[int], list[int]]:
    row: list[int] = []
    col: list[int] = []
    targets: list[int] = []
    for i, sample in enumerate(samples):
        at, start = place[i]
        last_prompt = len(sample.prompt_ids) - 1
        for k in trained_positions(sample):
            row.append(at)
            col.append(last_prompt if k == 0 else start + k - 1)
            targets.append(sample.response_ids[k])
    return row, col, targets


def _segment_mask(segments: list[list[int]], real: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, 1, width, width] bool: query q sees key k ≤ q of its own segment or of the prompt (segment 0).

    Padding columns get a segment of their own, so a padding query sees only itself (no query row is empty, which
    would make attention NaN) and no real query sees padding.
    """
    padded = torch.full((len(segments), width), -1, dtype=torch.long)
    for row, segment in enumerate(segments):
        padded[row, : len(segment)] = torch.tensor(segment, dtype=torch.long)
    columns = torch.arange(width)
    padded = torch.where(real, padded, -1 - columns)  # a distinct negative id per padding column
    query, key = padded[:, :, None], padded[:, None, :]
    visible = (key == query) | ((key == 0) & (query >= 0))
    causal = columns[None, :] <= columns[:, None]
    return (visible & causal)[:, None]


@dataclass(frozen=True)
class Segments:
    """A packed batch's rows as one prompt and its continuations, and the gathers that let attention read, for each
    query, only the keys it may see: a prompt query its prompt (causally), a continuation's query the whole prompt
    and its own continuation (causally).

    `attend` runs two attention calls instead of one masked square: the rows' first `prompt` columns with the causal
    kernel (a shorter prompt's row has continuation tokens there, whose outputs are dropped), then every
    continuation, right-padded to `span` columns, against its row's first `prompt` columns and its own — keys
    gathered per continuation, so a prompt key's gradient sums over the G continuations that read it.
    """

    prompt: int
    """Columns of the prompt block: the longest prompt of the batch."""
    span: int
    """Columns of the continuation block: the longest continuation."""
    queries: torch.Tensor
    """[continuations × span] flat index (row × width + column) of each continuation's queries, padding clamped."""
    keys: torch.Tensor
    """[continuations × (prompt + span)] flat index of the keys each continuation reads: its row's prompt block,
    then its own columns."""
    mask: torch.Tensor
    """[continuations, 1, span, prompt + span] bool, True = may attend: prompt keys of the row's own prompt, own
    keys up to the query."""
    source: torch.Tensor
    """[rows × width] for each output position, its index in the prompt outputs followed by the continuation
    outputs (flattened); padding takes index 0, and no real query reads it."""

    @classmethod
    def plan(
        cls, prompt_lengths: list[int], spans: list[tuple[int, int, int]], width: int, device: torch.device
    ) -> Segments:
        """`prompt_lengths[r]`: row r's prompt; `spans`: (row, first column, length) of every continuation."""
        prompt, span = max(prompt_lengths), max(length for _, _, length in spans)
        rows = torch.tensor([row for row, _, _ in spans], dtype=torch.long)
        starts = torch.tensor([start for _, start, _ in spans], dtype=torch.long)
        steps = torch.arange(span)
        own = (starts[:, None] + steps).clamp(max=width - 1)
        queries = rows[:, None] * width + own
        keys = torch.cat([rows[:, None] * width + torch.arange(prompt), queries], dim=1)
        in_prompt = torch.arange(prompt)[None, :] < torch.tensor(prompt_lengths)[rows][:, None]
        causal = steps[None, :] <= steps[:, None]
        mask = torch.cat([in_prompt[:, None, :].expand(-1, span, -1), causal.expand(len(spans), -1, -1)], dim=2)
        source = torch.zeros(len(prompt_lengths), width, dtype=torch.long)
        for row, length in enumerate(prompt_lengths):
            source[row, :length] = row * prompt + torch.arange(length)
        first = len(prompt_lengths) * prompt
        for j, (row, start, length) in enumerate(spans):
            source[row, start : start + length] = first + j * span + torch.arange(length)
        return cls(
            prompt,
            span,
            queries.flatten().to(device),
            keys.flatten().to(device),
            mask[:, None].to(device),
            source.flatten().to(device),
        )

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None) -> torch.Tensor:
        """Attention of `query` [rows, q_heads, width, dim] over `key`, `value` [rows, kv_heads, width, dim];
        returns [rows, width, q_heads, dim] (transformers' layout after attention)."""
        rows, q_heads, width, dim = query.shape
        kv_heads = key.shape[1]
        prompt = F.scaled_dot_product_attention(
            query[:, :, : self.prompt],
            key[:, :, : self.prompt],
            value[:, :, : self.prompt],
            is_causal=True,
            scale=scale,
            enable_gqa=q_heads != kv_heads,
        )
        n = self.mask.shape[0]

        def gather(states: torch.Tensor, index: torch.Tensor, length: int) -> torch.Tensor:
            heads = states.shape[1]
            flat = states.transpose(1, 2).reshape(rows * width, heads, dim)
            return flat.index_select(0, index).view(n, length, heads, dim).transpose(1, 2)

        keys = self.prompt + self.span
        own = F.scaled_dot_product_attention(
            gather(query, self.queries, self.span),
            gather(key, self.keys, keys),
            gather(value, self.keys, keys),
            attn_mask=self.mask,
            scale=scale,
            enable_gqa=q_heads != kv_heads,
        )
        outputs = torch.cat(
            [prompt.transpose(1, 2).reshape(-1, q_heads, dim), own.transpose(1, 2).reshape(-1, q_heads, dim)]
        )
        return outputs.index_select(0, self.source).view(rows, width, q_heads, dim)


@contextmanager
def grouped_attention(lm: PreTrainedModel) -> Iterator[bool]:
    """Run `lm` with the grouped attention that takes 4-D boolean masks; yields whether the switch took (a model
    whose attention does not go through transformers' AttentionInterface keeps its own). Restores it afterwards."""
    previous = lm.config._attn_implementation
    lm.set_attn_implementation(GROUPED_SDPA)
    try:
        yield lm.config._attn_implementation == GROUPED_SDPA
    finally:
        lm.set_attn_implementation(previous)


def takes_packed_mask(lm: PreTrainedModel) -> bool:
    """Whether `lm` can run the shared-prefix layout."""
    with grouped_attention(lm) as switched:
        return switched


# -- helpers ---------------------------------------------------------------------------------------------------


def _pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [rows, longest] long tensor and its [rows, longest] bool mask of real entries."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(sequences), width), dtype=torch.bool)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        real[i, : len(sequence)] = True
    return ids, real


def _indices(
    row: list[int], col: list[int], targets: list[int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return tensor(row), tensor(col), tensor(targets)
