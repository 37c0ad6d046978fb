"""The rollout's KV cache and the attention that reads it; it knows key and value tensors, nothing about the
protocol, sampling or the weights.

- The cache (`RowCache`) keeps one write pointer per row instead of left padding: row r's tokens sit in columns
  0..length_r-1, a token's position id is its column (plus the length of the shared prefix kept apart, if any), and
  a row attends to columns up to its own. Rows therefore never carry holes, and a row that appends an observation
  just advances its own pointer.
- On the CPU a shared prompt prefix stays in the cache once and every row attends to it in one matrix product with
  the other rows that continue it (cascade attention, `_with_prefixes`).
- Attention runs through `_grouped_sdpa`, registered with transformers under `GROUPED_SDPA` and switched on only
  while the engine generates (and while a training layout's packed rows are scored, `prefix.grouped_attention`):
  grouped-query attention over the cache without repeating the key/value heads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache

GROUPED_SDPA = "inspo_grouped_sdpa"
"""The attention implementation the engine switches the model to while it generates."""


def _grouped_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Scaled dot-product attention for grouped-query models without copying keys and values per query head.

    The query heads that share a key/value head are folded into the query-length axis, so one SDPA call per
    key/value head serves them all; the boolean mask is repeated to match. When the engine's cache holds shared
    prefixes (`rollout_cache`), `key` and `value` are the rows' own columns and each row's prefix is attended to
    separately (`_with_prefixes`). A training layout's packed rows (`segments`, a `prefix.Segments`) are attended
    to segment by segment instead of through their mask. Returns (batch, length, heads, dim).
    """
    window = kwargs.get("sliding_window")
    if kwargs.get("softcap") is not None or (window is not None and key.shape[2] > window):
        raise NotImplementedError(f"{GROUPED_SDPA} supports neither logit soft-capping nor sliding-window attention")
    segments = kwargs.get("segments")
    if segments is not None:  # a training layout's packed rows (`prefix.Segments`)
        return segments.attend(query, key, value, scaling), None
    batch, q_heads, length, dim = query.shape
    kv_heads = key.shape[1]
    group = q_heads // kv_heads
    folded = query.reshape(batch, kv_heads, group * length, dim)
    if attention_mask is not None and group > 1 and length > 1:  # one query position: the mask broadcasts
        attention_mask = attention_mask.repeat(1, 1, group, 1)
    cache = kwargs.get("rollout_cache")
    if isinstance(cache, RowCache) and cache.prefixes:
        out = _with_prefixes(folded, key, value, attention_mask, scaling, cache.prefixes_of(module.layer_idx))
    else:
        out = F.scaled_dot_product_attention(folded, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, q_heads, length, dim).transpose(1, 2), None


AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa)


def _with_prefixes(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float | None,
    prefixes: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """Attention over each row's shared prefix and its own columns, merged by their log-sum-exps (cascade attention).

    `prefixes` holds (rows, keys, values): the rows of the batch that continue one prefix (None: all of them), and
    that prefix's keys and values [1, kv_heads, length, dim]. Those rows' queries are stacked into one attention
    call against the prefix, a matrix product instead of one small product per row; the prefix precedes every
    row's own tokens, so no mask is needed there. The two parts' outputs are weighted by the share of the softmax
    mass each holds, sigmoid(lse_own − lse_prefix). Needs the CPU flash-attention kernel, which returns the
    log-sum-exp.
    """
    additive = None if mask is None else query.new_zeros(mask.shape).masked_fill_(~mask, float("-inf"))
    own, own_lse = _flash_attention(query, key, value, attn_mask=additive, scale=scale)
    out = own.float()
    _, kv_heads, length, dim = query.shape
    for rows, prefix_keys, prefix_values in prefixes:
        mine = query if rows is None else query.index_select(0, rows)
        stacked = mine.transpose(0, 1).reshape(1, kv_heads, -1, dim)
        shared, shared_lse = _flash_attention(stacked, prefix_keys, prefix_values, scale=scale)
        shared = shared.reshape(kv_heads, -1, length, dim).transpose(0, 1).float()
        shared_lse = shared_lse.reshape(kv_heads, -1, length).transpose(0, 1)
        lse = own_lse if rows is None else own_lse.index_select(0, rows)
        weight = torch.sigmoid(lse - shared_lse)[..., None]
        if rows is None:
            out = torch.lerp(shared, out, weight)
        else:
            out.index_copy_(0, rows, torch.lerp(shared, out.index_select(0, rows), weight))
    return out.to(query.dtype)


def _flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's CPU flash attention: (output, log-sum-exp of the scaled scores per query, float32)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, False, attn_mask=attn_mask, scale=scale
    )
    return out, lse


class RowCache(Cache):
    """Preallocated keys and values with one write pointer per row; the engine plans where each forward writes.

    Buffers are (rows, kv_heads, capacity, head_dim) per layer, allocated at the first write; when a forward needs
    more columns they grow to its width plus `margin` (one layer at a time, so memory peaks one layer above the new
    size). Unwritten or stale columns are zero or finite and always masked, so they never reach the softmax.

    Shared prefixes (`share_prefixes`): the rows written so far become read-only prefixes, kept once each, and the
    cache starts over with rows that each continue one of them. Such a row's column c holds position offset + c,
    where offset is its prefix's length; attention reads the prefix and the row's own columns separately and merges
    them (`_with_prefixes`), so rows that share a prompt prefix neither copy nor re-read it one by one.
    """

    def __init__(self, rows: int, capacity: int, margin: int, device: torch.device) -> None:
        super().__init__(layers=[])
        self.rows = rows
        self.capacity = capacity
        self.margin = margin
        self.device = device
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.prefixes = False
        """Whether rows continue shared prefixes."""
        self._prefix_keys: list[torch.Tensor] = []
        self._prefix_values: list[torch.Tensor] = []
        self._prefix_lengths: list[int] = []
        self._prefix_of_row: list[int] = [0] * rows
        self._planned_prefixes: list[tuple[int, torch.Tensor | None]] = []
        self._select: torch.Tensor | None = None
        self._write_rows: torch.Tensor | None = None
        self._cols: torch.Tensor | None = None
        self._width = 0

    def plan(self, select: list[int] | None, positions: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """The next forward feeds rows `select` (None = all) and writes token i of row j at position positions[j, i];
        returns the attention mask over the rows' own columns (each token sees its row's columns up to its own).
        `width`: the columns that forward reaches, when the caller knows it (`step_width`; read from the device
        otherwise)."""
        rows = list(range(self.rows)) if select is None else select
        offsets = index_tensor([self._offset(row) for row in rows], self.device)
        cols = positions - offsets[:, None]
        if width is None:
            width = int(cols.max()) + 1
        if width > self.capacity:
            self._grow(width + self.margin)
        self._select = None if select is None else index_tensor(select, self.device)
        self._write_rows = index_tensor(rows, self.device)[:, None]
        self._cols = cols
        self._width = width
        self._planned_prefixes = self._prefix_members(rows)
        return torch.arange(width, device=self.device)[None, None, None, :] <= cols[:, None, :, None]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):
            shape = (self.rows, key_states.shape[1], self.capacity, key_states.shape[3])
            self.keys.append(key_states.new_zeros(shape))
            self.values.append(value_states.new_zeros(shape))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys[self._write_rows, :, self._cols] = key_states.transpose(1, 2)
        values[self._write_rows, :, self._cols] = value_states.transpose(1, 2)
        if self._select is None:
            return keys[:, :, : self._width], values[:, :, : self._width]
        return keys[self._select, :, : self._width], values[self._select, :, : self._width]

    def step_width(self, lengths: list[int]) -> int:
        """The columns a forward reaches that writes one token to every row at its position lengths[row]."""
        return max(length - self._offset(row) for row, length in enumerate(lengths)) + 1

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._width

    def share_prefixes(self, lengths: list[int], prefix_of_row: list[int]) -> None:
        """Keep the first lengths[p] columns of row p as prefix p, and start over with len(prefix_of_row) empty rows,
        row i continuing prefix prefix_of_row[i]."""
        longest = max(lengths, default=0)
        self._prefix_keys = [buffer[:, :, :longest] for buffer in self.keys]
        self._prefix_values = [buffer[:, :, :longest] for buffer in self.values]
        self._prefix_lengths = list(lengths)
        self._prefix_of_row = list(prefix_of_row)
        self.prefixes = longest > 0
        self.keys, self.values = [], []
        self.rows = len(prefix_of_row)

    def prefixes_of(self, layer_idx: int) -> list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]]:
        """For the planned forward: (rows of the batch, keys, values) of each shared prefix those rows continue."""
        return [
            (
                rows,
                self._prefix_keys[layer_idx][prefix : prefix + 1, :, : self._prefix_lengths[prefix]],
                self._prefix_values[layer_idx][prefix : prefix + 1, :, : self._prefix_lengths[prefix]],
            )
            for prefix, rows in self._planned_prefixes
        ]

    def select_rows(self, index: list[int]) -> None:
        """Keep, reorder or repeat rows: row i becomes old row index[i]."""
        chosen = index_tensor(index, self.device)
        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                buffers[i] = buffer.index_select(0, chosen)
        self._prefix_of_row = [self._prefix_of_row[i] for i in index]
        self.rows = len(index)

    def _offset(self, row: int) -> int:
        return self._prefix_lengths[self._prefix_of_row[row]] if self.prefixes else 0

    def _prefix_members(self, rows: list[int]) -> list[tuple[int, torch.Tensor | None]]:
        """(prefix, positions in `rows` of the rows that continue it; None: all of them) for every non-empty shared
        prefix."""
        if not self.prefixes:
            return []
        members: dict[int, list[int]] = {}
        for j, row in enumerate(rows):
            members.setdefault(self._prefix_of_row[row], []).append(j)
        return [
            (prefix, None if len(js) == len(rows) else torch.tensor(js, device=self.device))
            for prefix, js in members.items()
            if self._prefix_lengths[prefix] > 0
        ]

    def _grow(self, capacity: int) -> None:
        def wider(buffer: torch.Tensor) -> torch.Tensor:
            out = buffer.new_zeros((*buffer.shape[:2], capacity, buffer.shape[3]))
            out[:, :, : buffer.shape[2]] = buffer
            return out

        for buffers in (self.keys, self.values):
            for i, buffer in enumerate(buffers):
                buffers[i] = wider(buffer)
        self.capacity = capacity


def index_tensor(values: list[int], device: torch.device) -> torch.Tensor:
    """`values` on `device`; to a GPU through pinned memory without waiting (a plain copy waits for the stream)."""
    if device.type != "cuda":
        return torch.tensor(values, device=device)
    return torch.tensor(values, pin_memory=True).to(device, non_blocking=True)
