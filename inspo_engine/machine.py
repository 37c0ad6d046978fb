"""What a run computed on, as its `RunStarted` event records it: the CPU (its model and the matrix extensions that
decide which kernels run), the torch version and thread count, and the GPU when one is in use.

Two runs of one seed compute the same thing only on the same kind of machine: the kernels of another CPU (AMX
against AVX512-BF16, say) round bfloat16 products differently, the first step's samples already differ, and the runs
part ways from there. An experiment pairs its arms by seed, so `experiments` says when its runs come from more than
one such machine.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

MATRIX_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")
"""CPU flags that decide which matrix kernels torch and oneDNN pick, in the order they are reported."""


def describe(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """This process's machine: `cpu`, `cpu_flags` (those of MATRIX_FLAGS the CPU has), `python`, and where torch is
    installed `torch`, `threads` and `gpu` (the current CUDA device, when CUDA is in use)."""
    model, flags = _cpu(cpuinfo)
    machine = {"cpu": model or platform.processor() or platform.machine(), "cpu_flags": " ".join(flags)}
    machine["python"] = platform.python_version()
    try:
        import torch  # every backend's process has it loaded already
    except ImportError:
        return machine
    machine["torch"] = str(torch.__version__)
    machine["threads"] = str(torch.get_num_threads())
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
        machine["gpu"] = torch.cuda.get_device_name()
    return machine


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """Those of MATRIX_FLAGS this machine's CPU has (empty where /proc/cpuinfo cannot be read)."""
    return _cpu(cpuinfo)[1]


def peak_rss_kib() -> int:
    """This process's resident-set peak so far, in KiB (Linux's `ru_maxrss`, as `VmHWM`); 0 where unknown."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak // 1024 if sys.platform == "darwin" else peak)  # macOS counts bytes


def _cpu(cpuinfo: Path) -> tuple[str, list[str]]:
    """(model name, the MATRIX_FLAGS present) from a Linux /proc/cpuinfo; ("", []) elsewhere."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", []
    model, present = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not present:
            present = set(value.split())
    return model, [flag for flag in MATRIX_FLAGS if flag in present]


def described(machine: dict[str, str] | None) -> str:
    """A machine as a run recorded it, in words ("not recorded" for a run that recorded none).

    >>> described({"cpu": "Xeon", "cpu_flags": "avx2", "threads": "2"}), described(None)
    ('cpu Xeon, cpu_flags avx2, threads 2', 'not recorded')
    """
    return ", ".join(f"{key} {value}" for key, value in machine.items()) if machine else "not recorded"


def same_machine_groups(machines: dict[str, dict[str, str] | None]) -> list[tuple[dict[str, str] | None, list[str]]]:
    """Run names grouped by the machine each recorded (None: a run that recorded none), in first-seen order.

    >>> same_machine_groups({"a-s0": {"cpu": "x"}, "b-s0": None, "a-s1": {"cpu": "x"}})
    [({'cpu': 'x'}, ['a-s0', 'a-s1']), (None, ['b-s0'])]
    """
    groups: list[tuple[dict[str, str] | None, list[str]]] = []
    for name, machine in machines.items():
        for recorded, names in groups:
            if recorded == machine:
                names.append(name)
                break
        else:
            groups.append((machine, [name]))
    return groups
