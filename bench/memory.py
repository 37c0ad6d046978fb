"""Where a training run's resident memory peaks: `python -m inspo_engine train` in this process, with a thread that
samples the resident set every few milliseconds and charges it to the stage the main thread is in.

    OMP_NUM_THREADS=1 .venv/bin/python bench/memory.py --preset cpu-demo --out /tmp/mem-run \
        [--set grpo.total_steps=2 --set evolution.evolve_every=2 ...] [--interval-ms 10]

Every argument after the script's own is handed to `train`. Prints a markdown table of each stage's peak and of
the resident set at its start, and the main thread's Python stack when the whole run peaked. Stages: rollouts,
the reference and old log-prob passes, the update's forward/backward passes (`accumulate`) and its optimizer
step, checkpoints, and everything else ("other": loading, evolution, evaluation). Linux only (reads
/proc/self/status).
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inspo_engine.backends.torch import grpo, rollout  # noqa: E402
from inspo_engine.cli import main as cli_main  # noqa: E402

STAGES = {
    (rollout.RolloutEngine, "generate"): "rollout",
    (grpo.GRPOTrainer, "reference_logprob_rows"): "reference log-probs",
    (grpo.GRPOTrainer, "accumulate"): "update: forward/backward",
    (grpo.GRPOTrainer, "_optimise"): "update: optimizer step",
    (grpo.GRPOTrainer, "save"): "checkpoint",
}
"""Methods whose calls are a stage (the innermost stage counts; `_optimise` holds `accumulate`)."""


def resident_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


class Sampler:
    """The resident set's peak per stage, sampled from a daemon thread."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.stage = "other"
        self.peaks: dict[str, int] = {}
        self.starts: dict[str, int] = {}
        self.top = 0
        self.top_stack = ""
        self._main = threading.get_ident()

    def run(self) -> None:
        while True:
            kib, stage = resident_kib(), self.stage
            self.peaks[stage] = max(self.peaks.get(stage, 0), kib)
            if kib > self.top:
                frame = sys._current_frames().get(self._main)
                self.top = kib
                self.top_stack = "".join(traceback.format_stack(frame)[-8:]) if frame is not None else ""
            time.sleep(self.interval_s)

    def staged(self, method: Callable[..., Any], stage: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer, self.stage = self.stage, stage
            self.starts[stage] = max(self.starts.get(stage, 0), resident_kib())
            try:
                return method(*args, **kwargs)
            finally:
                self.stage = outer

        return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args, train_args = parser.parse_known_args()
    sampler = Sampler(args.interval_ms / 1000)
    for (owner, name), stage in STAGES.items():
        setattr(owner, name, sampler.staged(getattr(owner, name), stage))
    threading.Thread(target=sampler.run, daemon=True).start()
    code = cli_main(["train", *train_args])
    print("\n| stage | peak RSS (KiB) | largest RSS at its start (KiB) |\n|---|---:|---:|")
    for stage, peak in sorted(sampler.peaks.items(), key=lambda item: -item[1]):
        start = sampler.starts.get(stage)
        print(f"| {stage} | {peak:,} | {'–' if start is None else f'{start:,}'} |")
    print(f"\npeak {sampler.top:,} KiB, main thread at:\n{sampler.top_stack}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
