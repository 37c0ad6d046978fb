"""Keeping a CPU training process's resident memory near what its tensors hold.

PyTorch's CPU allocator is the C library's malloc. glibc raises its mmap threshold each time a large block is freed
(up to 32 MiB), after which tensors of a few MiB come from the heap instead of their own mappings; the activations,
KV caches and gradients freed between stages then stay resident as heap holes that later, differently sized tensors
cannot reuse, and a GRPO process's RSS creeps up step after step. Pinning the threshold keeps every tensor of
`MMAP_THRESHOLD` bytes or more in its own mapping, returned to the system when freed; `release` hands back what the
heap still holds free at the end of a stage. Elsewhere (macOS, musl, a GPU) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

logger = logging.getLogger(__name__)

MMAP_THRESHOLD = 1 << 20
"""Blocks this size or larger (1 MiB) get their own mapping; below it, the heap (small tensors, Python objects)."""

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both exist only in glibc
    except (OSError, AttributeError):
        return None
    return libc


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold for this process (stops its dynamic growth); True if it was set."""
    libc = _glibc()
    if libc is None:
        return False
    done = bool(libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(threshold)))
    if not done:
        logger.warning("could not pin the C library's mmap threshold; resident memory may creep up between steps")
    return done


def release() -> bool:
    """Return the heap's free pages to the system (glibc's malloc_trim); True if any memory was given back."""
    libc = _glibc()
    return bool(libc.malloc_trim(ctypes.c_size_t(0))) if libc is not None else False
