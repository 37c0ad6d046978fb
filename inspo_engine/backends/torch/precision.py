"""The torch backend's numeric precision (`backend.precision`): the dtype the weights are kept in, the dtype products
run in, and the autocast region that joins them; it knows dtypes and devices, nothing about training or rollouts.

- `fp32`: float32 weights, float32 products. A bfloat16 rollout copy or reference may still be asked for with
  `backend.rollout_dtype` / `backend.reference_dtype` (their products then run in float32 on rounded weights).
- `bf16-mixed`: the standard automatic mixed precision recipe, the same code on CPU and CUDA. The trained weights
  (the masters) and AdamW's moments stay float32; the forward passes of the update and of the old and reference
  log-probs run under `torch.autocast(device, bfloat16)`, so matrix products read bfloat16 copies of the weights and
  write bfloat16 activations, while what autocast keeps in float32 (norms, softmax) and what this backend computes
  itself (the log-softmax of the output head, the loss, the advantages, the KL) stays float32. Rollouts read a
  bfloat16 copy of the policy refreshed after every update, and the frozen reference is stored in bfloat16.

`auto` (the torch presets' choice) is `bf16-mixed` where bfloat16 products run natively — a CUDA GPU that has them
(Ampere or later), a CPU with AVX512-BF16 or AMX — and `fp32` elsewhere: on an AVX512 CPU without them, oneDNN
emulates bfloat16, and an update took 3.7× its float32 time and a whole step 2.26× (`bench/step.py`,
docs/precision.md). `resolve` decides it once, when the backend starts, and the run's `RunStarted` event records
what it chose.

Why the masters stay float32: an AdamW step changes a weight by about lr (5e-7 in the paper), while bfloat16 keeps 8
significant bits — a weight of magnitude w moves only by a step of at least w · 2⁻⁹, so updating bfloat16 weights
in place rounds nearly every such step away (`tests/engine/torch_backend/test_precision.py` shows both).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ...machine import cpu_flags

Precision = Literal["fp32", "bf16-mixed"]
PrecisionSetting = Literal["auto", "fp32", "bf16-mixed"]
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags of instructions that compute bfloat16 products natively."""
NarrowDtype = Literal["policy", "bfloat16"]

NARROW_DTYPES: dict[str, torch.dtype | None] = {"policy": None, "bfloat16": torch.bfloat16}
"""`backend.rollout_dtype` / `backend.reference_dtype` → the dtype of that copy (None: as the policy)."""


@dataclass(frozen=True)
class PrecisionPlan:
    """What one `backend.precision` (with the two dtype fields) means for each part of the backend."""

    name: Precision
    master: torch.dtype
    """The dtype of the trained weights and the optimizer state."""
    compute: torch.dtype | None
    """The dtype autocast runs matrix products in; None: no autocast (products in `master`)."""
    rollout: torch.dtype | None
    """The dtype of the copy rollouts read; None: the policy itself."""
    reference: torch.dtype | None
    """The dtype the frozen reference's linear and embedding weights are stored in; None: as the policy."""

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[None]:
        """The region the forward passes of the update and the old/reference log-probs run in."""
        return compute_region(device, self.compute)


def resolve(setting: PrecisionSetting, device: torch.device, *, native: bool | None = None) -> Precision:
    """The precision a `backend.precision` setting computes in on `device`: `auto` is `bf16-mixed` where bfloat16
    products run natively (`native`, default `native_bfloat16(device)`), `fp32` elsewhere; the others are themselves.

    >>> cpu = torch.device("cpu")
    >>> resolve("auto", cpu, native=True), resolve("auto", cpu, native=False), resolve("fp32", cpu, native=True)
    ('bf16-mixed', 'fp32', 'fp32')
    """
    if setting == "auto":
        return "bf16-mixed" if (native_bfloat16(device) if native is None else native) else "fp32"
    if setting in ("fp32", "bf16-mixed"):
        return setting
    raise ValueError(f"unknown precision {setting!r}; choose 'auto', 'fp32' or 'bf16-mixed'")


def native_bfloat16(device: torch.device, flags: Sequence[str] | None = None) -> bool:
    """Whether `device` multiplies bfloat16 matrices in hardware: a CUDA GPU without emulation (compute capability
    8.0 or later), a CPU whose `flags` (default: this machine's, from /proc/cpuinfo) include AVX512-BF16 or AMX-BF16."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "cpu":
        return any(flag in NATIVE_BF16_FLAGS for flag in (cpu_flags() if flags is None else flags))
    return False


def plan(
    precision: Precision, *, rollout_dtype: NarrowDtype = "policy", reference_dtype: NarrowDtype = "policy"
) -> PrecisionPlan:
    """The plan of a config: under `bf16-mixed` the rollout copy and the reference are bfloat16 whatever the two dtype
    fields say (they are how `fp32` runs ask for those copies alone).

    >>> plan("bf16-mixed").rollout, plan("fp32").compute, plan("fp32", rollout_dtype="bfloat16").rollout
    (torch.bfloat16, None, torch.bfloat16)
    """
    if precision == "bf16-mixed":
        return PrecisionPlan(precision, torch.float32, torch.bfloat16, torch.bfloat16, torch.bfloat16)
    if precision == "fp32":
        return PrecisionPlan(
            precision, torch.float32, None, NARROW_DTYPES[rollout_dtype], NARROW_DTYPES[reference_dtype]
        )
    raise ValueError(f"unknown precision {precision!r}; choose 'fp32' or 'bf16-mixed'")


def compute_region(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[None]:
    """`torch.autocast(device.type, dtype)`, or nothing when `dtype` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def current_region(device_type: str) -> tuple[bool, torch.dtype]:
    """(whether autocast is on for `device_type` here, its dtype): what a custom autograd function records in its
    forward to recompute in backward under the same precision."""
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
