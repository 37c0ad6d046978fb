"""INSPO against the static baseline on the CPU demo: a thin call of `python -m inspo_engine experiment`.

Trains the cpu-demo preset as the arms `static`, `inspo`, `no-verify` and `random-pool`, once per seed, evaluates
every run's best instruction on the same built-in test questions, and writes the table with each arm's verdict
against static (results.md, results.json, reward.png, em.png under --out; docs/experiments.md explains them).

    .venv/bin/python bench/demo.py [--seeds 3] [--jobs 2] [--out runs/compare-demo]
                                   [--variants static,inspo,no-verify,random-pool] [--set key=value ...]
                                   [--import-team "Demo team" --import-user demo]

It is resumable like the experiment command: finished runs are kept, stopped ones resume from their checkpoint. With
--import-team the runs are loaded into the web app (`manage.py import_run`), where the compare page shows them. The
untrained model's score (the step-0 row) is `python -m inspo_engine eval --untrained --preset cpu-demo --dataset
builtin`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inspo_engine.cli import main as cli_main  # noqa: E402
from inspo_engine.experiments import run_name  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "compare-demo")
    parser.add_argument("--variants", default="static,inspo,no-verify,random-pool")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--import-team", help="load the runs into the web app under this team")
    parser.add_argument("--import-user", default="demo")
    args = parser.parse_args()
    sets = [arg for override in args.overrides for arg in ("--set", override)]
    status = cli_main(
        ["experiment", "--preset", "cpu-demo", "--arms", args.variants, "--seeds", str(args.seeds),
         "--jobs", str(args.jobs), "--out", str(args.out), *sets]
    )  # fmt: skip
    if args.import_team:
        arms = [arm.strip() for arm in args.variants.split(",") if arm.strip()]
        dirs = [str(args.out / run_name(arm, seed)) for seed in range(args.seeds) for arm in arms]
        done = [d for d in dirs if (Path(d) / "best_instruction.txt").exists()]
        command = [sys.executable, "manage.py", "import_run", "--team", args.import_team, "--user", args.import_user]
        subprocess.run([*command, *done], check=True, cwd=REPO)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
