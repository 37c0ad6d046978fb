"""INSPO against the static baseline on the CPU demo, side by side: one command, same budget and seeds.

Trains the cpu-demo preset three ways — `static` (the Search-R1 baseline: the seed instruction only), `inspo` (online
co-evolution) and `no-verify` (INSPO without verification: the prune-and-expand ablation) — for each seed, then
evaluates every final checkpoint with its best instruction I* on the built-in test split (greedy), and the untrained
model with the seed instruction as the step-0 row. Prints a Table-1-style markdown table with, for each variant, the
paired bootstrap 95 % interval of its EM gain over the untrained model on the same questions, then each variant's
EM difference from static, paired on the questions of the same seed.

    .venv/bin/python bench/demo.py [--seeds 1] [--out runs/compare-demo] [--variants static,inspo,no-verify]
                                   [--set key=value ...] [--import-team "Demo team" --import-user demo]
                                   [--train-only-seed N]

Runs are resumable: a variant whose directory already holds best_instruction.txt is not trained again, and an
evaluation already written is read back. To spread seeds over processes, give each `--train-only-seed N` (it trains
and evaluates that seed's variants, prints nothing), then run once more without it for the table. With
--import-team the runs are loaded into the web app (`manage.py import_run`), where the compare page shows the same
comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inspo_engine.checkpoints import latest_checkpoint  # noqa: E402
from inspo_engine.env.builtin import KINDS  # noqa: E402
from inspo_engine.env.rewards import answers_with_query, retrieved_gold  # noqa: E402
from inspo_engine.stats import paired_bootstrap  # noqa: E402

PYTHON = sys.executable
VARIANTS: dict[str, list[str]] = {
    "static": ["mode=static"],
    "inspo": [],
    "no-verify": ["evolution.verify=false"],
}
SPLIT = "test"


@dataclass
class Result:
    """One trained (or untrained) policy evaluated on the test split."""

    variant: str
    seed: int | None
    answers: list[dict[str, Any]]
    events: list[dict[str, Any]]
    seconds: float

    def mean(self, key: str) -> float:
        return statistics.fmean(float(a[key]) for a in self.answers)

    def gold_retrieved(self) -> float:
        """Share of the answers whose searches brought a gold answer into view: whether the searches were useful."""
        return statistics.fmean(float(retrieved_gold(a["response"], a["golden_answers"])) for a in self.answers)

    def training(self, key: str, *, last: bool = True, n: int = 5) -> float:
        """Mean of a step_completed field over the run's last (or first) n steps."""
        steps = [e for e in self.events if e["kind"] == "step_completed"]
        picked = steps[-n:] if last else steps[:n]
        return statistics.fmean(e[key] for e in picked) if picked else float("nan")

    def overhead(self, key: str) -> int:
        finished = [e for e in self.events if e["kind"] == "run_finished"]
        return int(finished[-1]["overhead"][key]) if finished else 0


def run(command: list[str]) -> None:
    print("$", " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, cwd=REPO)


def evaluate(out: Path, source: list[str], overrides: list[str]) -> list[dict[str, Any]]:
    """Greedy answers on the built-in test split, cached in out/eval.json."""
    target = out / "eval.json"
    if not target.exists():
        out.mkdir(parents=True, exist_ok=True)
        sets = [arg for o in overrides for arg in ("--set", o)]
        run([PYTHON, "-m", "inspo_engine", "eval", *source, "--dataset", "builtin", "--split", SPLIT, *sets,
             "--json", str(target)])  # fmt: skip
    answers: list[dict[str, Any]] = json.loads(target.read_text())["answers"]["builtin"]
    return answers


def train(out: Path, variant: str, seed: int, overrides: list[str]) -> float:
    """Train one variant unless its directory already holds a finished run; returns the seconds it took."""
    if (out / "best_instruction.txt").exists():
        return float((out / "seconds.txt").read_text()) if (out / "seconds.txt").exists() else float("nan")
    started = time.perf_counter()
    # the final evaluation is done here, with every answer kept, instead of inside the run
    extra = [*VARIANTS[variant], f"seed={seed}", "eval.benchmarks=[]", *overrides]
    sets = [arg for o in extra for arg in ("--set", o)]
    run([PYTHON, "-m", "inspo_engine", "train", "--preset", "cpu-demo", *sets, "--out", str(out)])
    seconds = time.perf_counter() - started
    (out / "seconds.txt").write_text(f"{seconds:.0f}\n")
    return seconds


def events_of(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]


def table(baseline: Result, results: list[Result]) -> str:
    head = (
        "| variant | seeds | test EM | F1 | answered | well-formed | tool calls | gold retrieved "
        "| train reward (first 5 → last 5) | train tool calls (last 5) | optimizer calls | verification rollouts "
        "| minutes | EM gain vs untrained [95 % CI] |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    rows = [_row("untrained + seed instruction", [baseline], baseline, gain=False)]
    for variant in VARIANTS:
        mine = [r for r in results if r.variant == variant]
        if mine:
            rows.append(_row(variant, mine, baseline, gain=True))
    return "\n".join([head, *rows])


def _row(name: str, results: list[Result], baseline: Result, *, gain: bool) -> str:
    def mean(values: list[float]) -> float:
        return statistics.fmean(values)

    cells = [
        name,
        str(len([r for r in results if r.seed is not None]) or "–"),
        *(f"{mean([r.mean(k) for r in results]):.3f}" for k in ("em", "f1", "answered", "format", "tool_calls")),
        f"{mean([r.gold_retrieved() for r in results]):.3f}",
        (
            f"{mean([r.training('reward_mean', last=False) for r in results]):.3f} → "
            f"{mean([r.training('reward_mean') for r in results]):.3f}"
        )
        if gain
        else "–",
        f"{mean([r.training('tool_calls_mean') for r in results]):.3f}" if gain else "–",
        f"{mean([r.overhead('optimizer_calls') for r in results]):.0f}" if gain else "–",
        f"{mean([r.overhead('verification_rollouts') for r in results]):.0f}" if gain else "–",
        f"{mean([r.seconds for r in results]) / 60:.1f}" if gain else "–",
        _gain(results, baseline) if gain else "–",
    ]
    return "| " + " | ".join(cells) + " |"


def answers_by_kind(results: list[Result]) -> str:
    """Per run: correct answers per kind of built-in question, and how many answers repeat the run's own query."""
    totals = {kind: sum(a["question_id"].split("-")[1] == kind for a in results[0].answers) for kind in KINDS}
    head = (
        "| run | " + " | ".join(f"correct {kind} (of {totals[kind]})" for kind in KINDS) + " | answer = own query "
        "(of which correct) |\n|---|" + "---:|" * (len(KINDS) + 1)
    )
    rows = []
    for r in results:
        correct = {kind: 0 for kind in KINDS}
        echoes = echoes_right = 0
        for a in r.answers:
            correct[a["question_id"].split("-")[1]] += int(float(a["em"]) == 1.0)
            if answers_with_query(a["response"]):
                echoes += 1
                echoes_right += int(float(a["em"]) == 1.0)
        name = r.variant if r.seed is None else f"{r.variant} s{r.seed}"
        cells = [name, *(str(correct[kind]) for kind in KINDS), f"{echoes} ({echoes_right})"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, *rows])


def against_static(results: list[Result]) -> list[str]:
    """Each variant's EM minus static's, paired on the same questions of the same seed (seeds pooled)."""
    static = {r.seed: {a["question_id"]: float(a["em"]) for a in r.answers} for r in results if r.variant == "static"}
    lines = []
    for variant in VARIANTS:
        mine = [r for r in results if r.variant == variant and variant != "static" and r.seed in static]
        pairs = [(float(a["em"]), static[r.seed][a["question_id"]]) for r in mine for a in r.answers]
        if pairs:
            diff = paired_bootstrap([p[0] for p in pairs], [p[1] for p in pairs])
            seeds = ", ".join(str(r.seed) for r in mine)
            lines.append(
                f"{variant} − static: {100 * diff.mean:+.1f} EM pts [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}] "
                f"(paired bootstrap 95 %, {len(pairs)} answers, seeds {seeds})"
            )
    return lines


def _gain(results: list[Result], baseline: Result) -> str:
    """EM gain over the untrained model on the same questions; seeds are pooled as extra paired items."""
    ours = [float(a["em"]) for r in results for a in r.answers]
    base = [float(a["em"]) for _ in results for a in baseline.answers]
    diff = paired_bootstrap(ours, base)
    return f"{100 * diff.mean:+.1f} pts [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "compare-demo")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--import-team", help="load the runs into the web app under this team")
    parser.add_argument("--import-user", default="demo")
    parser.add_argument("--train-only-seed", type=int, metavar="N", help="train and evaluate seed N only; no table")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")

    if args.train_only_seed is not None and not 0 <= args.train_only_seed < args.seeds:
        parser.error(f"--train-only-seed must be one of the --seeds: 0 to {args.seeds - 1}")
    seeds = range(args.seeds) if args.train_only_seed is None else [args.train_only_seed]

    results = []
    for seed in seeds:
        for variant in variants:
            out = args.out / f"{variant}-s{seed}"
            seconds = train(out, variant, seed, args.overrides)
            checkpoint = latest_checkpoint(out)
            if checkpoint is None:
                raise SystemExit(f"{out} has no checkpoint to evaluate")
            # --record: the test split's EM and F1 join the run's events, so an imported run shows them
            answers = evaluate(out / "final", ["--checkpoint", str(checkpoint), "--record"], [])
            results.append(Result(variant, seed, answers, events_of(out), seconds))
    if args.train_only_seed is not None:
        return 0
    # after training, so that variants trained by parallel invocations (one --variants each) do not all evaluate it
    untrained = evaluate(args.out / "untrained", ["--untrained", "--preset", "cpu-demo"], args.overrides)
    baseline = Result("untrained", None, untrained, [], 0.0)
    print(f"\ncpu-demo, {args.seeds} seed(s), built-in {SPLIT} split ({len(untrained)} questions), greedy, I* of each "
          f"run\n")  # fmt: skip
    print(table(baseline, results))
    print("", *against_static(results), sep="\n")
    print("\nThe answers, per run:\n")
    print(answers_by_kind([baseline, *results]))
    if args.import_team:
        dirs = [str(args.out / f"{v}-s{s}") for s in range(args.seeds) for v in variants]
        run([PYTHON, "manage.py", "import_run", "--team", args.import_team, "--user", args.import_user, *dirs])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
