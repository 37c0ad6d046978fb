"""What a run records of its machine: the CPU's model and matrix extensions read from /proc/cpuinfo, torch's version
and threads once torch is loaded."""

import pytest
import torch

from inspo_engine.machine import cpu_flags, describe, peak_rss_kib

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile
"""


def test_the_cpu_model_and_its_matrix_extensions_are_read_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    machine = describe(path)
    assert machine["cpu"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert machine["cpu_flags"] == "amx_bf16 amx_tile avx512_bf16 avx512f avx2"
    assert machine["torch"] == torch.__version__ and machine["threads"] == str(torch.get_num_threads())
    assert "gpu" not in machine or torch.cuda.is_initialized()
    assert cpu_flags(path) == ["amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2"]


def test_without_cpuinfo_the_platform_names_the_processor(tmp_path):
    machine = describe(tmp_path / "absent")
    assert machine["cpu"] and machine["cpu_flags"] == ""


def test_two_thread_counts_are_two_machines(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = describe(path)
        torch.set_num_threads(2)
        assert describe(path) != one  # a kernel may split its sums by thread: the runs need not compute the same
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_the_resident_peak_is_in_kib_and_rises_when_memory_is_touched():
    before = peak_rss_kib()
    assert before > 50_000  # this process holds torch: tens of MB at least, in KiB
    block = bytearray(before * 1024 + 64 * 2**20)  # more than the whole peak so far, zero-filled: every page touched
    assert peak_rss_kib() >= before + 64 * 1024
    del block
