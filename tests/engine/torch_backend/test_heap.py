"""Releasing the heap: small tensors freed at the end of a GRPO stage leave the process instead of staying resident."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

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
def test_release_hands_back_free_heap_pages() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["released"]
    assert probe["last"] == 1000.0
    assert probe["freed"] - probe["before"] > 60 << 20, "the small tensors' pages should still be resident after free()"
    kept = probe["after"] - probe["before"]
    assert kept < 20 << 20, f"{kept >> 20} MiB stayed resident after release()"
