"""The New experiment form's cost estimate: runs × the preset's minutes per run, in hours past two hours; a GPU preset
has none, and a preset not measured yet says so."""

from __future__ import annotations

from webapp.experiments.forms import MINUTES_PER_RUN, cost_text


def test_the_estimate_is_runs_times_the_presets_minutes():
    minutes = MINUTES_PER_RUN["smoke"]
    assert minutes is not None
    assert cost_text("smoke", 4) == f"4 runs × ~{minutes:.0f} min ≈ {4 * minutes:.0f} min of worker time"
    assert cost_text("cpu-demo", 12) == "12 runs × ~25 min ≈ 5.0 h of worker time"


def test_a_gpu_preset_and_an_unmeasured_one_have_no_estimate():
    assert cost_text("paper", 2) == "2 runs of the paper preset: GPU hours each, no estimate"
    assert cost_text("tomorrow", 3) == "3 runs of the tomorrow preset: no estimate yet"
