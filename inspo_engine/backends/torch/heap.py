"""Keeping a CPU training process's resident memory near what its tensors hold.

PyTorch's CPU allocator is the C library's malloc. glibc serves tensors below its mmap threshold (which grows to
32 MiB as large blocks are freed) from the heap, and keeps the pages of freed heap blocks: the activations, KV
caches and gradients freed at the end of one GRPO stage stay resident as holes that the next stage's differently
sized tensors cannot always reuse, and a training process's RSS creeps up step after step. `release` hands the
heap's free pages back to the system once per stage (glibc's malloc_trim). Pinning the mmap threshold low would do
more, but every KV-cache tensor would then be a fresh mapping: decoding took 35 % more CPU time that way (the
kernel zeroing pages), so the threshold is left to glibc. Elsewhere (macOS, musl) `release` is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


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
