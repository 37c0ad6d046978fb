"""Keeping a CPU training process's resident memory near what its tensors hold.

PyTorch's CPU allocator is the C library's malloc. glibc serves tensors below its mmap threshold (which grows to
32 MiB as large blocks are freed) from the heap, and keeps the pages of freed heap blocks: the activations, KV
caches and gradients freed at the end of one GRPO stage stay resident as holes that the next stage's differently
sized tensors cannot always reuse, and a training process's RSS creeps up step after step. `release` hands the
heap's free pages back to the system once per stage (glibc's malloc_trim). Pinning the mmap threshold low would do
more, but every KV-cache tensor would then be a fresh mapping: decoding took 35 % more CPU time that way (the
kernel zeroing pages), so the threshold is left to glibc. Pinned low only around the update, where a training
process peaks, it took 204 MB off a 2-step cpu-demo probe's peak (3,632,516 → 3,428,928 KiB) but cost 1.08× the
update's time (median of 4 alternating updates on the same rollouts): not kept (docs/benchmarks.md). Elsewhere
(macOS, musl) `release` is a no-op.

oneDNN, which runs the CPU's bfloat16 products (`backend.precision` 'bf16-mixed'), keeps every kernel it compiles,
one per operation and matrix shape, up to `ONEDNN_PRIMITIVE_CACHE_CAPACITY` of them (1,024 by default), and ideep,
PyTorch's layer over oneDNN, keeps beside it each product's prepared description per shape (`LRU_CACHE_CAPACITY`,
1,024 too). A GRPO step's shapes are new at every pass (each holds another number of tokens), so both caches only
grow until they are full: a bf16-mixed cpu-demo process kept about 110 MB more per step through the first and about
90 MB through the second, and never gave it back. `bound_kernel_cache` caps both at KERNEL_CACHE: the entries that
are reused (a decoding step's, for each batch size in turn) stay, the rest are made again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

KERNEL_CACHE = 64
"""Entries each of the two caches keeps in a CPU training process (`bound_kernel_cache`). The bf16-mixed cpu-demo's
seed 1, run again alone, peaked at 6,374,072 KiB with both at 1,024, 5,335,292 with oneDNN's at 64 and 4,644,700
with both at 64, in 15.5, 15.9 and 14.9 minutes, with the same rewards at every step and the same test EM
(docs/precision.md). Keeping no kernels at all ran 2.3× slower."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - exists only in glibc
    except (OSError, AttributeError):
        return None
    return libc


def release() -> bool:
    """Return the heap's free pages to the system (glibc's malloc_trim); True if any memory was given back."""
    libc = _glibc()
    return bool(libc.malloc_trim(ctypes.c_size_t(0))) if libc is not None else False


KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
"""oneDNN's kernel cache, and the cache of ideep (PyTorch's layer over oneDNN) that keeps each product's prepared
description per shape beside it: both grow with every new shape, both default to 1,024 entries."""


def bound_kernel_cache(capacity: int = KERNEL_CACHE) -> None:
    """Cap oneDNN's kernel cache and ideep's at `capacity` entries each, unless the environment sets the variable
    already. Both are read once, when the process runs its first such product, so call this before the first
    bfloat16 product."""
    for variable in KERNEL_CACHES:
        os.environ.setdefault(variable, str(capacity))
