"""The torch backend's multi-turn Search-R1 rollout engine: batched, KV-cached sampling with search calls between
turns; it knows tokens and the protocol, nothing about rewards, advantages or training.

How a batch runs:

- Prompts are the tokenizer's chat template over `chat_messages` (by default the instruction, then the question, in
  the user turn; optionally the instruction as the system message). Identical
  prompts (the G rollouts of a group) are prefilled once, and the longest common token prefix of the prompts that
  share an instruction is prefilled once per instruction. On the CPU that prefix then stays in the cache once and
  every row attends to it in one matrix product with its instruction's other rows (cascade attention); elsewhere it
  is copied out to every row. The rest of each prompt is copied out to its G rollouts.
- The KV cache (`_RowCache`) keeps one write pointer per row instead of left padding: row r's tokens sit in columns
  0..length_r-1, a token's position id is its column (plus the length of the shared prefix kept apart, if any), and
  a row attends to columns up to its own. Rows therefore never carry holes, and a row that appends an observation
  just advances its own pointer.
- Each step feeds every active row its last sampled token in one batched forward (no copy of the cache); rows that
  ended a turn with a search or an invalid action then feed their observation tokens in a second forward over just
  those rows. Rows that finish (answer, or out of turns) leave the batch at once: their cache rows are dropped.
- A turn ends when the decoded tail of the turn contains a stop string (its tokens are kept), at EOS, or at the
  per-turn token budget. All searches requested in the same step go to the retriever in one call.
- A sample's answer is the content of the <answer> that ended it, taken from the model's own last turn. (Running
  `extract_answer` over the whole response would pick up the `<answer> and </answer>` that the invalid-action
  note itself shows.)
- Attention runs through `_grouped_sdpa`, registered with transformers under `GROUPED_SDPA` and switched on only
  while `generate` runs: grouped-query attention over the cache without repeating the key/value heads. The output
  head runs on each row's last hidden state only.
- Tokens are drawn by `_sample`: one uniform number per row, inverse CDF in two levels (blocks, then a token).
- On a GPU decoding never waits for the device per token (`_run_lagged`): each step's tokens are read into the cache
  on the device while their copy to the host is checked for stops, one forward behind, with the same results.
- Rollouts read `RolloutWeights`: the policy itself (default), or a copy in another dtype refreshed from the policy
  whenever its weights changed (`backend.rollout_dtype`); a bfloat16 copy on a CPU with AMX or AVX512-BF16 keeps
  its linear layers packed for oneDNN and decodes about twice as fast as float32.

Supported models: decoder-only transformers models whose attention goes through transformers' `AttentionInterface`,
that accept a 4-D boolean attention mask and `position_ids`, and whose logits are the output head applied to the
decoder's last hidden state (Llama, Qwen2, Mistral, SmolLM2, …; not models with final logit soft-capping).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.cache_utils import Cache

from ...config import EnvConfig
from ...env.protocol import (
    INVALID_ACTION_NOTE,
    STOP_STRINGS,
    Passage,
    Placement,
    Retriever,
    chat_messages,
    most_turns,
    observation,
    parse_action,
    rollout_over,
)
from ...types import Question
from .logits import split_causal_lm
from .samples import RolloutSample

GROUPED_SDPA = "inspo_grouped_sdpa"
"""The attention implementation the engine switches the model to while it generates."""

_TAIL_CHARS = 64
"""Characters of a turn's decoded tail searched for a stop string (well over the longest stop string)."""

_FORWARD_TOKENS = 8192
"""Most tokens (rows × chunk length) fed through the model in one forward when ingesting prompts or observations."""

_SAMPLE_BLOCK = 256
"""Tokens per block of the two-level inverse-CDF sampler (`_sample`)."""

_CLOSING = "</information>\n\n"
"""Kept at the end of an observation cut to max_obs_tokens, so the model still sees the block close."""


@dataclass(frozen=True)
class RolloutSettings:
    """Limits and sampling of one rollout (the Search-R1 protocol of INSPO.md)."""

    max_turns: int
    """Turns that may search (Search-R1's count); one more, final turn may only answer and ends the rollout."""
    max_turn_tokens: int
    """Token budget of one model turn."""
    max_obs_tokens: int
    """Observations longer than this are cut (keeping their closing tag)."""
    max_prompt_length: int
    """Longer prompts are not cut: the rollout fails with an error (score 0)."""
    top_k: int
    """Passages per search."""
    temperature: float = 1.0
    """Sampling temperature (ignored when greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off; ignored when greedy)."""
    placement: Placement = "user"
    """Where the instruction goes in the chat (see `chat_messages`)."""
    response_prefix: str = ""
    """Text that opens every reply: read with the prompt (so never trained), and the start of the response text."""
    final_turn_prefix: str = ""
    """Text that opens the final turn, written after the observation of the last search allowed (never trained)."""

    @classmethod
    def from_config(cls, env: EnvConfig, *, temperature: float, top_p: float, max_new_tokens: int) -> RolloutSettings:
        """Settings from the run config; the per-turn budget is the smaller of the env's and the backend's."""
        return cls(
            max_turns=env.max_turns,
            max_turn_tokens=min(env.max_turn_tokens, max_new_tokens),
            max_obs_tokens=env.max_obs_tokens,
            max_prompt_length=env.max_prompt_length,
            top_k=env.top_k,
            temperature=temperature,
            top_p=top_p,
            placement=env.instruction_placement,
            response_prefix=env.response_prefix,
            final_turn_prefix=env.final_turn_prefix,
        )


@dataclass
class _Row:
    """The running state of one rollout."""

    index: int
    instruction: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    tail: str = ""
    pending: list[int] = field(default_factory=list)
    """Tokens the model has not read yet: the last sampled one, then any observation or note."""
    length: int = 0
    """Cache columns this row fills."""
    turns: int = 0
    tool_calls: int = 0
    answer: str | None = None
    done: bool = False
    error: str | None = None
    rollout_logprobs: list[float] | None = None
    """log π of each response token under the weights that sampled it (0.0 on observations), when recorded."""
    truncated: bool = False
    """The rollout ended unfinished: its last turn cut by max_turn_tokens, or the context full."""


# -- attention and cache ---------------------------------------------------------------------------------------


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
    if isinstance(cache, _RowCache) and cache.prefixes:
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


class _RowCache(Cache):
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
        offsets = _tensor([self._offset(row) for row in rows], self.device)
        cols = positions - offsets[:, None]
        if width is None:
            width = int(cols.max()) + 1
        if width > self.capacity:
            self._grow(width + self.margin)
        self._select = None if select is None else _tensor(select, self.device)
        self._write_rows = _tensor(rows, self.device)[:, None]
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
        chosen = _tensor(index, self.device)
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


# -- the weights rollouts read --------------------------------------------------------------------------------


class RolloutWeights:
    """The weights rollouts read: the policy itself, or a copy of it in another dtype (e.g. bfloat16 on a CPU whose
    matrix units multiply it several times faster than float32) that is refreshed from the policy whenever the
    policy's weights have changed since the last refresh — after every update or load, never in between.

    A bfloat16 copy on a CPU with oneDNN's bfloat16 support also keeps its linear layers' weights packed in
    oneDNN's blocked layout (`_PackedLinear`), which halves their time at rollout batch sizes with the same results.
    A copy samples from a slightly different distribution than the policy the trainer scores the tokens with (the
    rollout/policy mismatch vLLM brings to verl); the trainer's log-probs always come from the policy itself.

    Between rollouts the copy may be `release`d: its storage (every weight in bfloat16, and each linear layer's
    packed layout besides: about as many bytes as the float32 policy) is freed while the update runs, and the next
    `current` rebuilds it from the policy exactly as a refresh would have written it.
    """

    def __init__(self, policy: nn.Module, dtype: torch.dtype | None) -> None:
        """A policy with LoRA adapters (peft) always gets a copy: its adapters merged into the weights (in `dtype`
        when given), so decoding runs plain linear layers instead of each one's adapter branch beside it."""
        self.policy = policy
        params = list(policy.parameters())
        self.copy: nn.Module | None = None
        self._sources: list[tuple[nn.Parameter, Callable[[], torch.Tensor]]] = []
        """Each copy parameter and what it is refreshed from."""
        adapters = lora_layers(policy)
        if adapters:
            self.copy, self._sources = _merged_copy(policy, adapters, dtype)
        elif dtype is not None and any(p.dtype != dtype for p in params if p.is_floating_point()):
            with torch.inference_mode(False), torch.no_grad():  # ordinary tensors, so that later refreshes may write
                # the memo hands deepcopy the converted parameters, so the policy's float32 weights are never
                # duplicated; tied parameters stay tied
                memo = {id(p): nn.Parameter(p.to(dtype) if p.is_floating_point() else p.clone(), False) for p in params}
                self.copy = copy.deepcopy(policy, memo).eval()
            self._sources = [(mine, _same(theirs)) for mine, theirs in zip(self.copy.parameters(), params, strict=True)]
        on_cpu = all(p.device.type == "cpu" for p in params)
        if self.copy is not None and dtype == torch.bfloat16 and on_cpu and _onednn_bfloat16():
            _pack_linear_layers(self.copy)
        self._seen = self._fingerprint()
        self._released = False

    def current(self) -> Any:
        """The model to roll out with (the copy refreshed first if the policy changed since, or rebuilt if it was
        released)."""
        if self.copy is None:
            return self.policy
        seen = self._fingerprint()
        if seen != self._seen or self._released:
            with torch.inference_mode(False), torch.no_grad():
                for mine, source in self._sources:
                    if self._released:
                        mine.data = source().detach().to(mine.dtype)
                    else:
                        mine.copy_(source())
                for module in self.copy.modules():
                    if isinstance(module, _PackedLinear):
                        module.pack()
            self._seen, self._released = seen, False
        return self.copy

    def release(self) -> None:
        """Free the copy's storage until the next `current` (nothing to do when rollouts read the policy itself):
        the update, where a training process's memory peaks, then runs without it."""
        if self.copy is None or self._released:
            return
        for param in self.copy.parameters():
            param.data = param.data.new_empty(0)
        for module in self.copy.modules():
            if isinstance(module, _PackedLinear):
                module.packed = None
        self._released = True

    def _fingerprint(self) -> tuple[tuple[int, int], ...]:
        """Where each policy parameter's data lives and its version counter (which every in-place write bumps)."""
        return tuple((p.data_ptr(), p._version) for p in self.policy.parameters())


def _same(tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: tensor


def lora_layers(policy: nn.Module) -> dict[str, Any]:
    """peft's LoRA layers of `policy` by their name in its base model ({} for a model without adapters)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(policy, PeftModel):
        return {}
    base = policy.get_base_model()
    return {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}


def _merged_copy(
    policy: Any, adapters: dict[str, Any], dtype: torch.dtype | None
) -> tuple[nn.Module, list[tuple[nn.Parameter, Callable[[], torch.Tensor]]]]:
    """A plain copy of a LoRA policy with its adapters merged (peft's `merge_and_unload` on a copy), in `dtype` when
    given, and what each of its parameters is refreshed from: W + ΔW of the adapters for a LoRA layer's weight, the
    base model's own parameter for the rest (frozen under LoRA, but read again all the same)."""
    base = policy.get_base_model()
    with torch.inference_mode(False), torch.no_grad():
        merged: nn.Module = copy.deepcopy(policy).merge_and_unload().eval()
        merged.requires_grad_(False)
        if dtype is not None:
            merged.to(dtype)
    sources: list[tuple[nn.Parameter, Callable[[], torch.Tensor]]] = []
    for name, param in merged.named_parameters():
        module, _, leaf = name.rpartition(".")
        layer = adapters.get(module)
        if layer is None:
            sources.append((param, _same(base.get_parameter(name))))
        elif leaf == "weight":
            sources.append((param, _merged_weight(layer)))
        else:
            sources.append((param, _same(getattr(layer.base_layer, leaf))))
    return merged, sources


def _merged_weight(layer: Any) -> Callable[[], torch.Tensor]:
    return lambda: layer.base_layer.weight + _lora_delta(layer)


def _lora_delta(layer: Any) -> torch.Tensor:
    """ΔW = scale · B A of the layer's active adapters (peft's own `get_delta_weight`)."""
    deltas = [layer.get_delta_weight(name) for name in layer.active_adapters if name in layer.lora_A]
    return torch.stack(deltas).sum(0) if len(deltas) > 1 else deltas[0]


class _PackedLinear(nn.Module):
    """A bfloat16 linear layer that multiplies through a copy of its weight in oneDNN's blocked layout (what the
    CPU's AMX or AVX512-BF16 units read without reordering it on every call). `weight` and `bias` stay the layer's
    own parameters, in the same order, so ties and refreshes see the same parameters as before."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed: torch.Tensor | None = _packed(self.weight)

    def pack(self) -> None:
        """Repack after the weight changed."""
        self.packed = _packed(self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.packed is not None, "a released rollout copy is used only through RolloutWeights.current()"
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(hidden, self.packed, self.bias, "none", [], "")
        return out


def _pack_linear_layers(model: nn.Module) -> None:
    """Swap every plain `nn.Linear` inside `model` for a `_PackedLinear` (in place, keeping each child's name)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, _PackedLinear(child))


def _packed(weight: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
    return out


def _onednn_bfloat16() -> bool:
    """Whether this PyTorch build and CPU run oneDNN's bfloat16 kernels: natively with AVX512-BF16 or AMX, emulated
    on other AVX512 CPUs (slower than float32 there; `precision.native_bfloat16` tells the two apart)."""
    available = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]  # untyped in torch
    return bool(available and torch.ops.mkldnn._is_mkldnn_bf16_supported())


# -- the engine ------------------------------------------------------------------------------------------------


class RolloutEngine:
    """Runs batches of Search-R1 rollouts with one policy model, its tokenizer and a retriever."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        retriever: Retriever,
        settings: RolloutSettings,
        *,
        device: torch.device,
        weights_dtype: torch.dtype | None = None,
        record_logprobs: bool = False,
    ) -> None:
        """`weights_dtype`: None (rollouts read the policy's own weights) or a dtype for a copy that rollouts read
        instead (see `RolloutWeights`). `record_logprobs`: sampled rollouts keep the log-prob of every token they
        sampled under the weights they read, at temperature 1 as the trainer scores them (`rollout_logprobs`), for
        the rollout correction; greedy ones never do."""
        self.record_logprobs = record_logprobs
        self.model = model
        self.tokenizer = tokenizer
        self.retriever = retriever
        self.settings = settings
        self.device = device
        self.weights = RolloutWeights(model, weights_dtype)
        self.share_prefixes = device.type == "cpu"
        """Whether the cache keeps shared prompt prefixes once (`_RowCache`; its attention needs the CPU kernel)."""
        self._lagged = device.type == "cuda"
        """Whether decoding reads each step's tokens back one forward late (`_run_lagged`): on a GPU the host then
        checks step t for stops while the device already reads its tokens; private, so that a CPU test can run it."""
        self._parts = split_causal_lm(model)
        self._eos = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self._pad = int(pad) if pad is not None else min(self._eos, default=0)
        self._note_ids = self._encode(INVALID_ACTION_NOTE)
        self._closing_ids = self._encode(_CLOSING)
        self._final_ids = self._encode(settings.final_turn_prefix) if settings.final_turn_prefix else []
        self._max_context: int | None = getattr(model.config, "max_position_embeddings", None)
        self._texts: dict[int, str] = {}

    def generate(
        self,
        items: Sequence[tuple[str, Question]],
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> list[RolloutSample]:
        """One rollout per (instruction, question), in order; repeat an item G times for a GRPO group.

        Sampling draws only from `generator` (same seed and items → same rollouts); without one, a fresh generator
        seeded from the operating system is used. A sample that cannot run (its prompt is too long, its context
        window is full) carries its error instead of raising; a failing retriever fails the whole call.
        """
        rows = self._rows(items)
        live = [row for row in rows if row.error is None]
        if live:
            if generator is None and not greedy:
                generator = torch.Generator(device=self.device)
                generator.seed()
            with self._generation_mode(), torch.inference_mode():
                self._run(live, greedy, generator)
        return [self._result(row) for row in rows]

    # -- prompts -----------------------------------------------------------------------------------------------

    def prompt_ids(self, instruction: str, question: Question) -> list[int]:
        """The chat prompt of `chat_messages`, ready for the model's reply (which opens with the response prefix)."""
        messages = chat_messages(instruction, question.text, self.settings.placement)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self._encode(text + self.settings.response_prefix)

    def _rows(self, items: Sequence[tuple[str, Question]]) -> list[_Row]:
        prompts: dict[tuple[str, str], list[int]] = {}
        rows = []
        for index, (instruction, question) in enumerate(items):
            key = (instruction, question.text)
            if key not in prompts:
                prompts[key] = self.prompt_ids(instruction, question)
            row = _Row(index, instruction, prompts[key])
            if len(row.prompt_ids) > self.settings.max_prompt_length:
                row.error = (
                    f"prompt has {len(row.prompt_ids)} tokens, more than max_prompt_length "
                    f"({self.settings.max_prompt_length}); it is not cut"
                )
            rows.append(row)
        return rows

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # -- the loop ----------------------------------------------------------------------------------------------

    def _run(self, rows: list[_Row], greedy: bool, generator: torch.Generator | None) -> None:
        if self._lagged and type(self)._next_tokens is RolloutEngine._next_tokens:  # a subclass may script tokens
            self._run_lagged(rows, greedy, generator)
            return
        cache, logits = self._prefill(rows)
        active = rows
        record = self.record_logprobs and not greedy
        recorded: list[tuple[list[_Row], list[int], torch.Tensor]] = []
        while True:
            tokens = self._next_tokens(logits, active, greedy, generator)
            if record:
                recorded.append(_sampled_logprobs(logits, active, tokens))
            self._advance(active, tokens)
            keep = [i for i, row in enumerate(active) if not row.done]
            if not keep:
                break
            if len(keep) < len(active):
                cache.select_rows(keep)
                active = [active[i] for i in keep]
            logits = self._step(cache, active)
        _store_logprobs(recorded)

    def _run_lagged(self, rows: list[_Row], greedy: bool, generator: torch.Generator | None) -> None:
        """`_run` without waiting for each step's tokens before the next forward: the sampled tokens stay on the device,
        which reads them into the cache for every active row at once while their copy to the host is checked for
        stops and turn ends. Rows whose turn ended then read their observation. When rows finished, the others read
        the step's tokens again without them (overwriting the same cache columns): a forward's numbers depend on the
        batch it runs in, and this keeps every value bit for bit those of `_run`, at one more forward per step in
        which rows finish. Sampling waits for the check, so it draws exactly what `_run` draws."""
        cache, logits = self._prefill(rows)
        active = rows
        record = self.record_logprobs and not greedy
        recorded: list[tuple[list[_Row], list[int], torch.Tensor]] = []
        while True:
            chosen = self._choose(logits, active, greedy, generator)
            if record:
                recorded.append(_sampled_logprobs(logits, active, chosen))
            tokens = _HostCopy(chosen)
            logits = self._feed(cache, active, chosen[:, None])
            self._advance(active, tokens.read())
            keep = [i for i, row in enumerate(active) if not row.done]
            if not keep:
                break
            if len(keep) < len(active):  # read the tokens again without the finished rows, as `_run` reads them
                cache.select_rows(keep)
                active = [active[i] for i in keep]
                logits = self._feed(cache, active, chosen.index_select(0, _tensor(keep, self.device))[:, None])
            logits = self._feed_rest(cache, active, logits)
        _store_logprobs(recorded)

    def _prefill(self, rows: list[_Row]) -> tuple[_RowCache, torch.Tensor]:
        """Read every prompt into a fresh cache; returns it with one row per rollout and each row's next logits.

        Each distinct prompt is read once, after its instruction's shared token prefix, read once per instruction.
        On the CPU the prefixes stay shared in the cache (see `_RowCache`); elsewhere each row gets its own copy.
        """
        distinct: dict[tuple[int, ...], int] = {}
        prompt_of_row = [distinct.setdefault(tuple(row.prompt_ids), len(distinct)) for row in rows]
        prompts = [list(ids) for ids in distinct]
        owners: dict[int, str] = {}
        for row, prompt in zip(rows, prompt_of_row, strict=True):
            owners.setdefault(prompt, row.instruction)
        group_of_prompt, shared = _shared_prefixes(prompts, [owners[p] for p in range(len(prompts))])
        longest = max(len(ids) for ids in prompts)
        observed = max(self.settings.max_obs_tokens, len(self._note_ids)) + len(self._final_ids)
        margin = self.settings.max_turn_tokens + observed
        capacity = longest + self.settings.max_turn_tokens + 1
        cache = _RowCache(len(shared), capacity=capacity, margin=margin, device=self.device)
        if any(shared):
            self._ingest(cache, list(range(len(shared))), [0] * len(shared), shared)
        if self.share_prefixes:
            cache.share_prefixes([len(ids) for ids in shared], group_of_prompt)
        else:
            cache.select_rows(group_of_prompt)
        starts = [len(shared[g]) for g in group_of_prompt]
        rests = [ids[start:] for ids, start in zip(prompts, starts, strict=True)]
        logits = self._ingest(cache, list(range(len(prompts))), starts, rests)
        cache.select_rows(prompt_of_row)
        for row in rows:
            row.length = len(row.prompt_ids)
        return cache, logits.index_select(0, torch.tensor(prompt_of_row, device=self.device))

    def _step(self, cache: _RowCache, active: list[_Row]) -> torch.Tensor:
        """Feed every row its pending tokens; returns each row's next-token logits."""
        tokens = torch.tensor([[row.pending[0]] for row in active], device=self.device)
        return self._feed_rest(cache, active, self._feed(cache, active, tokens))

    def _feed(self, cache: _RowCache, active: list[_Row], tokens: torch.Tensor) -> torch.Tensor:
        """One forward feeding row j the token tokens[j, 0] at its next position; returns the logits after it (row
        lengths advance in `_feed_rest`)."""
        lengths = [row.length for row in active]
        positions = _tensor(lengths, self.device)[:, None]
        return self._forward(cache, None, tokens, positions, cache.step_width(lengths))

    def _feed_rest(self, cache: _RowCache, active: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """After `_feed`: feed the rows the rest of their pending tokens (an observation or the note); returns every
        row's next-token logits."""
        for row in active:
            row.length += 1
        extra = [i for i, row in enumerate(active) if len(row.pending) > 1]
        if extra:
            chunks = [active[i].pending[1:] for i in extra]
            fed = self._ingest(cache, extra, [active[i].length for i in extra], chunks)
            logits[torch.tensor(extra, device=self.device)] = fed
            for i, chunk in zip(extra, chunks, strict=True):
                active[i].length += len(chunk)
        for row in active:
            row.pending = []
        return logits

    def _ingest(self, cache: _RowCache, where: list[int], starts: list[int], chunks: list[list[int]]) -> torch.Tensor:
        """Feed chunks[j] to cache row where[j], from position starts[j]; returns the logits after each chunk.

        Chunks are left-padded to one width so that every chunk ends at the last input position, and the padded
        inputs are rotated in the cache to the positions after the chunk's real tokens, where they stay masked.
        """
        out = []
        for lo, hi in _spans([len(chunk) for chunk in chunks], _FORWARD_TOKENS):
            width = max(len(chunk) for chunk in chunks[lo:hi])
            ids = torch.tensor([[self._pad] * (width - len(c)) + c for c in chunks[lo:hi]], device=self.device)
            fill = torch.tensor([len(c) for c in chunks[lo:hi]], device=self.device)
            start = torch.tensor(starts[lo:hi], device=self.device)
            offsets = (torch.arange(width, device=self.device)[None, :] - (width - fill)[:, None]) % width
            select = None if where[lo:hi] == list(range(cache.rows)) else where[lo:hi]
            out.append(self._forward(cache, select, ids, start[:, None] + offsets))
        return torch.cat(out)

    def _forward(
        self,
        cache: _RowCache,
        select: list[int] | None,
        ids: torch.Tensor,
        positions: torch.Tensor,
        width: int | None = None,
    ) -> torch.Tensor:
        """One forward pass feeding ids[j, i] at position positions[j, i] to cache row select[j] (None: row j);
        returns the logits after each row's last input (`width`: see `_RowCache.plan`)."""
        mask = cache.plan(select, positions, width)
        out = self._parts.decoder(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            rollout_cache=cache,  # transformers hands it on to the attention function
        )
        # the head reads one 2-D row per sequence: through transformers' logits_to_keep a bfloat16 prefill went
        # through a batched matmul that copied the head's weights once per sequence
        logits: torch.Tensor = self._parts.head(out.last_hidden_state[:, -1]).float()
        return logits

    def _next_tokens(
        self, logits: torch.Tensor, rows: list[_Row], greedy: bool, generator: torch.Generator | None
    ) -> list[int]:
        """The next token of every row (`rows` lets a subclass script some rows)."""
        return [int(token) for token in self._choose(logits, rows, greedy, generator).tolist()]

    def _choose(
        self, logits: torch.Tensor, rows: list[_Row], greedy: bool, generator: torch.Generator | None
    ) -> torch.Tensor:
        """The next token of every row, on the device (`rows` as in `_next_tokens`)."""
        if greedy:
            return logits.argmax(dim=-1)
        return _sample(logits, self.settings.temperature, self.settings.top_p, generator)

    # -- the protocol ------------------------------------------------------------------------------------------

    def _advance(self, active: list[_Row], tokens: list[int]) -> None:
        """Append each row's new token; close the turns that ended, running all their searches in one call."""
        searches: list[tuple[_Row, str]] = []
        for row, token in zip(active, tokens, strict=True):
            row.response_ids.append(token)
            row.response_mask.append(1)
            row.turn_ids.append(token)
            row.pending = [token]
            row.tail = (row.tail + self._text(token))[-_TAIL_CHARS:]
            if self._turn_over(row, token):
                query = self._end_turn(row)
                if query is not None:
                    searches.append((row, query))
        if searches:
            self._search(searches)

    def _turn_over(self, row: _Row, token: int) -> bool:
        if token in self._eos or len(row.turn_ids) >= self.settings.max_turn_tokens:
            return True
        return any(stop in row.tail for stop in STOP_STRINGS)

    def _end_turn(self, row: _Row) -> str | None:
        """Close a turn: an answer or the final turn ends the rollout; a search returns its query; anything else (no
        action, or an empty query) gets the invalid-action note."""
        row.turns += 1
        text = self.tokenizer.decode(row.turn_ids)
        if row.turns == 1:  # the response prefix opens the first turn: a tag it opens is the model's to close
            text = self.settings.response_prefix + text
        elif row.turns == most_turns(self.settings.max_turns):  # and the final-turn prefix the last one
            text = self.settings.final_turn_prefix + text
        action = parse_action(text)
        closed = row.turn_ids[-1] in self._eos or any(stop in row.tail for stop in STOP_STRINGS)
        cut = len(row.turn_ids) >= self.settings.max_turn_tokens and not closed
        row.turn_ids, row.tail = [], ""
        if rollout_over(action, row.turns, self.settings.max_turns):
            row.answer = action.content if action.kind == "answer" else None
            row.truncated = cut and action.kind != "answer"
            row.done = True
            return None
        if action.kind == "search" and action.content:
            return action.content
        self._observe(row, self._note_ids)
        return None

    def _search(self, searches: list[tuple[_Row, str]]) -> None:
        queries = [query for _, query in searches]
        results = self.retriever.search(queries, self.settings.top_k)
        if len(results) != len(queries):
            raise RuntimeError(f"retriever answered {len(results)} result lists for {len(queries)} queries")
        for (row, _), passages in zip(searches, results, strict=True):
            row.tool_calls += 1
            self._observe(row, self._observation_ids(passages))

    def _observation_ids(self, passages: Sequence[Passage]) -> list[int]:
        """The observation's tokens, cut to max_obs_tokens; a cut one still ends with its closing tag."""
        ids = self._encode(observation(passages))
        limit = self.settings.max_obs_tokens
        if len(ids) <= limit:
            return ids
        closing = self._closing_ids if len(self._closing_ids) < limit else []
        return ids[: limit - len(closing)] + closing

    def _observe(self, row: _Row, ids: list[int]) -> None:
        """Append what the environment answers a turn with and, when the next turn is the final one, what opens it."""
        final = row.turns + 1 == most_turns(self.settings.max_turns)
        self._append(row, ids + self._final_ids if final else ids)

    def _append(self, row: _Row, ids: list[int]) -> None:
        """Append masked tokens (an observation or the note) that the model reads before its next turn."""
        needed = row.length + len(row.pending) + len(ids) + self.settings.max_turn_tokens
        if self._max_context is not None and needed > self._max_context:
            row.done = row.truncated = True
            row.error = f"context window full: the next turn could need {needed} of {self._max_context} positions"
            return
        row.response_ids += ids
        row.response_mask += [0] * len(ids)
        row.pending += ids

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token])
        return text

    def _result(self, row: _Row) -> RolloutSample:
        text = self.settings.response_prefix + self.tokenizer.decode(row.response_ids, skip_special_tokens=True)
        return RolloutSample(
            prompt_ids=list(row.prompt_ids),  # the rows of a group share one list while running
            response_ids=row.response_ids,
            response_mask=row.response_mask,
            response_text=text,
            answer=row.answer,
            tool_calls=row.tool_calls,
            turns=row.turns,
            error=row.error,
            rollout_logprobs=row.rollout_logprobs,
            truncated=row.truncated,
        )

    @contextmanager
    def _generation_mode(self) -> Iterator[None]:
        """The weights rollouts read (refreshed first when they are a copy) in eval mode with grouped attention; the
        model's own settings come back afterwards."""
        model = self.weights.current()
        self._parts = split_causal_lm(model)
        previous = model.config._attn_implementation
        was_training = model.training
        model.set_attn_implementation(GROUPED_SDPA)
        if model.config._attn_implementation != GROUPED_SDPA:
            raise NotImplementedError(f"{type(model).__name__} cannot switch to the engine's attention")
        model.eval()
        try:
            yield
        finally:
            model.set_attn_implementation(previous)
            model.train(was_training)


# -- helpers ---------------------------------------------------------------------------------------------------


def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), restricted to the top-p nucleus when top_p < 1.

    Inverse-CDF sampling with one uniform number per row (torch.multinomial draws one per vocabulary entry, about
    15 % of a CPU decode step at batch 40), in two levels so that no full-vocabulary cumulative sum is made (that
    float64 cumsum was another 5–10 %): the draw picks a block of `_SAMPLE_BLOCK` tokens from the blocks' summed
    weights, then a token inside that block. The weights are exp(logit − max) in float32 (the softmax's own
    precision), summed per block in float32; the cumulative sums and the draw are float64. A token of zero weight
    (outside the nucleus) is never chosen.
    """
    if temperature != 1.0:
        logits = logits / temperature
    if top_p < 1.0:
        logits = _nucleus(logits, top_p)
    rows, vocab = logits.shape
    blocks = -(-vocab // _SAMPLE_BLOCK)
    weights = logits.new_empty((rows, blocks * _SAMPLE_BLOCK))
    weights[:, vocab:] = 0.0
    torch.sub(logits, logits.amax(dim=-1, keepdim=True), out=weights[:, :vocab]).exp_()
    weights = weights.view(rows, blocks, _SAMPLE_BLOCK)
    block_cdf = weights.sum(dim=-1).double().cumsum_(dim=-1)
    draws = torch.rand(rows, 1, generator=generator, dtype=torch.float64, device=_device_of(generator, logits))
    draws = draws.to(logits.device) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, draws, right=True).minimum(_last_rise(block_cdf))
    before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp(min=0)), 0.0)
    inner = weights[torch.arange(rows, device=logits.device), block.squeeze(1)].double().cumsum_(dim=-1)
    chosen = torch.searchsorted(inner, draws - before, right=True).minimum(_last_rise(inner))
    return (block * _SAMPLE_BLOCK + chosen).squeeze(1)


def _sampled_logprobs(
    logits: torch.Tensor, rows: list[_Row], tokens: list[int] | torch.Tensor
) -> tuple[list[_Row], list[int], torch.Tensor]:
    """(rows, where each row's token goes in its response, log softmax(logits)[token]) of one decoding step; the
    values stay on the device until `_store_logprobs` reads them all at once."""
    chosen = (tokens if isinstance(tokens, torch.Tensor) else torch.tensor(tokens, device=logits.device))[:, None]
    picked = (logits.gather(1, chosen) - torch.logsumexp(logits, dim=-1, keepdim=True)).squeeze(1)
    return list(rows), [len(row.response_ids) for row in rows], picked


def _store_logprobs(recorded: list[tuple[list[_Row], list[int], torch.Tensor]]) -> None:
    """Give every recorded row its `rollout_logprobs`: the sampled tokens' values, 0.0 on observation tokens."""
    if not recorded:
        return
    values = iter(torch.cat([picked for *_, picked in recorded]).tolist())
    for rows, positions, _ in recorded:
        for row, position in zip(rows, positions, strict=True):
            if row.rollout_logprobs is None:
                row.rollout_logprobs = [0.0] * len(row.response_ids)
            row.rollout_logprobs[position] = next(values)


def _tensor(values: list[int], device: torch.device) -> torch.Tensor:
    """`values` on `device`; to a GPU through pinned memory without waiting (a plain copy waits for the stream)."""
    if device.type != "cuda":
        return torch.tensor(values, device=device)
    return torch.tensor(values, pin_memory=True).to(device, non_blocking=True)


class _HostCopy:
    """Integers on the device copied to the host without blocking; `read` waits for that copy only (on a GPU, an
    event recorded right after it), not for the work queued behind it."""

    def __init__(self, values: torch.Tensor) -> None:
        self._event: torch.cuda.Event | None = None
        if values.device.type == "cuda":
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # untyped in torch
            self._event.record()
        else:
            self._host = values

    def read(self) -> list[int]:
        if self._event is not None:
            self._event.synchronize()
        return [int(value) for value in self._host.tolist()]


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


def _shared_prefixes(prompts: list[list[int]], owners: list[str]) -> tuple[list[int], list[list[int]]]:
    """Group prompts by owner (their instruction); returns each prompt's group and each group's longest common
    token prefix, kept at least one token shorter than every prompt of the group."""
    groups: dict[str, int] = {}
    group_of = [groups.setdefault(owner, len(groups)) for owner in owners]
    shared: list[list[int] | None] = [None] * len(groups)
    for ids, group in zip(prompts, group_of, strict=True):
        prefix = shared[group]
        if prefix is None:
            shared[group] = ids[: len(ids) - 1]
            continue
        same = 0
        for a, b in zip(prefix, ids[: len(ids) - 1], strict=False):
            if a != b:
                break
            same += 1
        shared[group] = prefix[:same]
    return group_of, [prefix or [] for prefix in shared]


def _spans(sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive [lo, hi) spans whose padded size (rows × longest) stays within budget (at least one row each)."""
    spans = []
    lo, longest = 0, 0
    for i, size in enumerate(sizes):
        longest = max(longest, size)
        if i > lo and (i - lo + 1) * longest > budget:
            spans.append((lo, i))
            lo, longest = i, size
    spans.append((lo, len(sizes)))
    return spans


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every end-of-sequence id the tokenizer or the model's generation config names."""
    ids: set[int] = set()
    generation = getattr(model, "generation_config", None)
    for source in (tokenizer.eos_token_id, getattr(generation, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list | tuple):
            ids.update(int(i) for i in source)
    return frozenset(ids)
