"""The weights rollouts read: the policy itself, or a copy in another dtype (LoRA adapters merged, linear layers
packed for oneDNN) refreshed whenever the policy changed; it knows modules and dtypes, nothing about generation.

A bfloat16 copy on a CPU with AMX or AVX512-BF16 keeps its linear layers packed for oneDNN and decodes about twice as
fast as float32 (`backend.rollout_dtype`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .adapters import FrozenLinear, lora_delta, lora_layers


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
        self._packed_only: set[int] = set()
        """ids of the copy's weights that only a packed layer reads: their plain storage is freed once packed."""
        if self.copy is not None and dtype == torch.bfloat16 and on_cpu and _onednn_bfloat16():
            _pack_linear_layers(self.copy)
            self._packed_only = _read_only_packed(self.copy)
            self._drop_packed_plain()
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
                    if id(mine) in self._packed_only:
                        continue  # below, one layer at a time
                    if self._released:
                        mine.data = source().detach().to(mine.dtype)
                    else:
                        mine.copy_(source())
                sources = {id(mine): source for mine, source in self._sources}
                for module in self.copy.modules():
                    if not isinstance(module, _PackedLinear):
                        continue
                    plain_only = id(module.weight) in self._packed_only
                    if plain_only:  # only this layer's plain weight exists at a time: the packed ones replace them
                        module.weight.data = sources[id(module.weight)]().detach().to(module.weight.dtype)
                    module.pack()
                    if plain_only:
                        module.weight.data = module.weight.data.new_empty(0)
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

    def _drop_packed_plain(self) -> None:
        """Free the plain storage of the weights only packed layers read (all linear layers but a head tied to the
        embedding): decoding reads their packed layout, and a refresh rebuilds them from the policy as a release
        does. A bfloat16 copy of SmolLM2 holds 0.21 GB less through every rollout."""
        assert self.copy is not None or not self._packed_only
        for param in self.copy.parameters() if self.copy is not None else ():
            if id(param) in self._packed_only:
                param.data = param.data.new_empty(0)

    def _fingerprint(self) -> tuple[tuple[int, int], ...]:
        """Where each policy parameter's data lives and its version counter (which every in-place write bumps)."""
        return tuple((p.data_ptr(), p._version) for p in self.policy.parameters())


def _same(tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: tensor


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
        if dtype is not None:  # the parameters only: `Module.to` would round the buffers too (RoPE's inv_freq)
            for param in merged.parameters():
                if param.is_floating_point():
                    param.data = param.data.to(dtype)
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
    return lambda: layer.base_layer.weight + lora_delta(layer)


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
    """Swap every plain `nn.Linear` (or a LoRA base's `FrozenLinear`) inside `model` for a `_PackedLinear` (in place,
    keeping each child's name)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and type(child) in (nn.Linear, FrozenLinear):
                setattr(parent, name, _PackedLinear(child))


def _read_only_packed(model: nn.Module) -> set[int]:
    """ids of the weights of `model`'s packed layers that no other module reads (a tied output head's weight is the
    embedding's too, and stays)."""
    uses: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            uses[id(param)] = uses.get(id(param), 0) + 1
    packed = (m.weight for m in model.modules() if isinstance(m, _PackedLinear))
    return {id(weight) for weight in packed if uses[id(weight)] == 1}


def _packed(weight: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
    return out


def _onednn_bfloat16() -> bool:
    """Whether this PyTorch build and CPU run oneDNN's bfloat16 kernels: natively with AVX512-BF16 or AMX, emulated
    on other AVX512 CPUs (slower than float32 there; `precision.native_bfloat16` tells the two apart)."""
    available = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]  # untyped in torch
    return bool(available and torch.ops.mkldnn._is_mkldnn_bf16_supported())
