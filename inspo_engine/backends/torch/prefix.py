"""How training samples are laid out for one forward pass, and where each trained token's prediction sits in it; it
knows token ids, masks and attention, nothing about log-probs, losses or rewards.

Two layouts, both listing the trained tokens (response_mask 1) in sample order, then token order:

- `padded_layout`: one right-padded row per sample (prompt + response), the model's own attention and a 2-D mask.
- `shared_prefix_layout`: one row per distinct prompt — the G rollouts of a question — holding the prompt once and
  then every continuation, each behind a 4-D boolean mask that lets it see the prompt and itself (causally) but not
  its siblings, with position ids restarting after the prompt. The prompt is read once per group, and in training
  its gradient is accumulated once from all G continuations: the idea of Prefix Grouper (arXiv 2506.05433). The
  last prompt position predicts the first token of every continuation, so its hidden state is used G times.

The shared-prefix layout runs the model with the rollout engine's grouped attention (`GROUPED_SDPA`), which takes a
4-D boolean mask; `takes_packed_mask` tells whether a model can switch to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .rollout import GROUPED_SDPA
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
    for row, (prompt, members) in enumerate(groups.items()):
        ids, segment, position = list(prompt), [0] * len(prompt), list(range(len(prompt)))
        for number, i in enumerate(members, start=1):
            response = samples[i].response_ids
            place[i] = (row, len(ids))
            ids += response
            segment += [number] * len(response)
            position += range(len(prompt), len(prompt) + len(response))
        sequences.append(ids)
        segments.append(segment)
        positions.append(position)
    input_ids, real = _pad(sequences, pad_id)
    mask = _segment_mask(segments, real, input_ids.shape[1])
    return Layout(
        input_ids.to(device),
        mask.to(device),
        _pad(positions, 0)[0].to(device),
        *_indices(*_shared_targets(samples, place), device),
        counts=[len(trained_positions(s)) for s in samples],
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
