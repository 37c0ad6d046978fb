"""Releasing the heap: small tensors freed at the end of a GRPO stage leave the process instead of staying resident."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch import heap

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the heap settings act on glibc only")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@glibc_only
def test_release_hands_back_free_heap_pages() -> None:
    before = rss_bytes()
    small = [torch.ones(1000) for _ in range(20_000)]  # 80 MB in 4 KB tensors: below the threshold, on the heap
    last = small[-1]  # held at the heap's top, so free() alone cannot shrink the heap
    del small
    freed = rss_bytes()
    assert heap.release()
    after = rss_bytes()
    assert freed - before > 60 << 20, "the small tensors' pages should still be resident after free()"
    assert after - before < 20 << 20, f"{(after - before) >> 20} MiB stayed resident after release()"
    assert float(last.sum()) == 1000.0
