"""Releasing the heap: small tensors freed at the end of a GRPO stage leave the process instead of staying resident."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from inspo_engine.backends.torch.precision import native_bfloat16

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the heap settings act on glibc only")

# Run in a fresh process: in a long test session the heap already holds free pages that new tensors reuse.
PROBE = """
import json, torch
from inspo_engine.backends.torch import heap

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

before = rss()
small = [torch.ones(1000) for _ in range(20_000)]  # 80 MB in 4 KB tensors: below the mmap threshold, on the heap
last = small[-1]  # held at the heap's top, so free() alone cannot shrink the heap
del small
freed = rss()
released = heap.release()
print(json.dumps({"before": before, "freed": freed, "after": rss(), "released": released, "last": float(last.sum())}))
"""


@glibc_only
@pytest.mark.slow
def test_release_hands_back_free_heap_pages() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["released"]
    assert probe["last"] == 1000.0
    assert probe["freed"] - probe["before"] > 60 << 20, "the small tensors' pages should still be resident after free()"
    kept = probe["after"] - probe["before"]
    assert kept < 20 << 20, f"{kept >> 20} MiB stayed resident after release()"


# 400 bfloat16 products of 400 different shapes: oneDNN compiles a kernel for each and keeps up to its cache's
# capacity of them (ideep too, its prepared description). The bound is either the shipped default
# (`bound_kernel_cache()`) or oneDNN's own 1,024, set in the environment first (which `bound_kernel_cache` keeps).
KERNELS = """
import os, sys, torch
from inspo_engine.backends.torch import heap

for variable in heap.KERNEL_CACHES:
    os.environ.pop(variable, None)
    if sys.argv[1] != "default":
        os.environ[variable] = sys.argv[1]
heap.bound_kernel_cache()

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

torch.set_num_threads(1)
weight, rows = torch.randn(1536, 576).bfloat16(), torch.randn(400, 576).bfloat16()
out = torch.empty(400, 1536, dtype=torch.bfloat16)
torch.mm(rows[:1], weight.T, out=out[:1])
heap.release()
before = rss()
for n in range(2, 402):
    torch.mm(rows[:n], weight.T, out=out[:n])
heap.release()
print(rss() - before)
"""


def test_bound_kernel_cache_keeps_values_the_environment_sets(monkeypatch) -> None:
    from inspo_engine.backends.torch import heap

    for variable in heap.KERNEL_CACHES:
        monkeypatch.setenv(variable, "512")
    heap.bound_kernel_cache()
    assert [os.environ[variable] for variable in heap.KERNEL_CACHES] == ["512", "512"]
    for variable in heap.KERNEL_CACHES:
        monkeypatch.delenv(variable)
    heap.bound_kernel_cache()
    assert [os.environ[variable] for variable in heap.KERNEL_CACHES] == [str(heap.KERNEL_CACHE)] * 2


@glibc_only
@pytest.mark.skipif(
    not native_bfloat16(torch.device("cpu")),
    reason="oneDNN compiles a large kernel per shape where bfloat16 is native (AVX512-BF16, AMX); emulated on "
    "AVX512 alone, 400 shapes kept 25 MiB with 1,024 entries and 10 bounded",
)
def test_the_bounded_kernel_cache_keeps_less_memory_than_onednns_default() -> None:
    grown = {}
    for bound in ("default", "1024"):
        out = subprocess.run(
            [sys.executable, "-c", KERNELS, bound], capture_output=True, text=True, check=True, timeout=120
        )
        grown[bound] = int(out.stdout.strip().splitlines()[-1])
    saved = grown["1024"] - grown["default"]
    assert saved > 60 << 20, f"400 shapes kept {grown['1024'] >> 20} MiB with 1,024, {grown['default'] >> 20} bounded"
