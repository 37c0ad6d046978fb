"""A stand-in for the verl job (`INSPO_VERL_COMMAND`): it takes the launcher's overrides, trains with the engine's
scripted policy, and writes real engine events to `<+inspo.out_dir>/events.jsonl`, honouring the stop file and the
control file as the real job does.

Environment knobs for tests: FAKE_VERL_STEP_S (seconds per step), FAKE_VERL_CRASH_AT (step that dies with a
CUDA-like error), FAKE_VERL_IGNORE_STOP=1 (never looks at the stop file, only a signal ends it),
FAKE_VERL_ENV_DUMP (a file to write the job's whole environment to). Like the real job, it takes the optimizer's
key from INSPO_OPTIMIZER_API_KEY.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inspo_engine.checkpoints import latest_checkpoint
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.control import FileControlChannel
from inspo_engine.env.datasets import load_questions
from inspo_engine.events import JsonlSink
from inspo_engine.optimizers import optimizer_for
from tests.engine.fakes import ScriptedBackend


class SlowBackend(ScriptedBackend):
    def __init__(self, seed: int, step_s: float, crash_at: int) -> None:
        super().__init__(seed=seed)
        self.step_s, self.crash_at, self.calls = step_s, crash_at, 0

    def rollout(self, requests: Sequence[Any], group_size: int) -> Any:
        self.calls += 1
        if self.calls == self.crash_at:
            print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
            raise SystemExit(1)
        time.sleep(self.step_s)
        return super().rollout(requests, group_size)


def main(argv: Sequence[str]) -> int:
    options = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    out_dir = Path(options["+inspo.out_dir"].strip("'"))
    config = RunConfig.from_json(Path(options["+inspo.run_config"].strip("'")).read_text(encoding="utf-8"))
    print(f"fake verl job: {len(argv)} overrides, resume={options.get('trainer.resume_mode')}", flush=True)
    if os.environ.get("FAKE_VERL_ENV_DUMP"):
        Path(os.environ["FAKE_VERL_ENV_DUMP"]).write_text(json.dumps(dict(os.environ)), encoding="utf-8")
    backend = SlowBackend(
        config.seed, float(os.environ.get("FAKE_VERL_STEP_S", "0")), int(os.environ.get("FAKE_VERL_CRASH_AT", "0"))
    )
    ignore_stop = os.environ.get("FAKE_VERL_IGNORE_STOP") == "1"
    loop = CoEvolution(
        config,
        backend=backend,
        train_questions=load_questions(config.env.dataset, "train"),
        optimizer=optimizer_for(config, out_dir / "cache", os.environ.get("INSPO_OPTIMIZER_API_KEY")),
        sink=JsonlSink(out_dir / "events.jsonl"),
        out_dir=out_dir,
        should_stop=lambda: not ignore_stop and (out_dir / "STOP").exists(),
        control=FileControlChannel(out_dir),
    )
    if options.get("trainer.resume_mode") == "resume_path":
        checkpoint = latest_checkpoint(out_dir)
        assert checkpoint is not None
        loop.load_checkpoint(checkpoint)
    loop.run()
    while ignore_stop:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
