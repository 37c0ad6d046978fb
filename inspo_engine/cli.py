"""The command line (`python -m inspo_engine …`): parses arguments, builds runs and prints; the engine does the work.

Like the verl launcher and job, it is an entry point that reads environment variables (INSPO_OPTIMIZER_API_KEY,
GEMINI_API_KEY, OPENAI_API_KEY, INSPO_CACHE_DIR, through `environ`), and it hands their values to the engine
explicitly.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from .checkpoints import (
    CHECKPOINTS_DIR,
    OPTIMIZER_DIR,
    POLICY_DIR,
    STATE_FILE,
    checkpoint_step,
    latest_checkpoint,
    read_state,
)
from .config import RunConfig, field_paths
from .config_fields import ConfigError, parse_override
from .control import TARGETED, ControlRequest, FileControlChannel, Inject, Pin, Retire, Unpin, request_to_dict
from .environ import api_key_from_env, cache_dir_from_env
from .events import (
    BudgetExhausted,
    CheckpointSaved,
    ControlHandled,
    EvalCompleted,
    Event,
    EventSink,
    EvolutionCompleted,
    FanoutSink,
    InstructionPruned,
    JsonlSink,
    OptimizerFailed,
    PopulationChanged,
    PopulationCollapsed,
    PopulationRecovered,
    StepCompleted,
    read_events,
)
from .experiments import BUILTIN_ARM_MEANINGS, BUILTIN_ARMS, Experiment, experiment_from_dict
from .presets import PRESETS, preset
from .tracking import TrackingSink, package_errors


class UsageError(Exception):
    """A problem the user can fix: printed without a traceback, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m inspo_engine", description="INSPO: instruction-policy co-evolution"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    config = commands.add_parser("config", help="show run configurations")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    add_config_source(config_commands.add_parser("show", help="print the full config as JSON"))
    config_commands.add_parser("fields", help="list every field path")

    train = commands.add_parser("train", help="train a policy while its instructions co-evolve")
    add_config_source(train)
    train.add_argument("--out", type=Path, required=True, help="run directory: events, checkpoints, best instruction")
    train.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    add_cache(train)

    control = commands.add_parser(
        "control", help="steer a running run: inject an instruction, pin, unpin or retire one, list requests"
    )
    control.add_argument("--out", type=Path, required=True, help="the run directory of `train --out`")
    control.add_argument("--author", default=None, help="who asks (default: your user name)")
    control_commands = control.add_subparsers(dest="control_command", required=True)
    inject = control_commands.add_parser("inject", help="add an instruction at the next step boundary")
    inject.add_argument("text", help="the instruction")
    inject.add_argument("--no-verify", action="store_true", help="join unscored instead of verified against I*")
    for kind in ("pin", "unpin", "retire"):
        control_commands.add_parser(kind, help=f"{kind} an instruction").add_argument("instruction_id")
    control_commands.add_parser("list", help="every request and its outcome")

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint or an untrained model: EM and F1 per benchmark")
    source = evaluate.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, help="a checkpoints/step-NNNNNN directory")
    source.add_argument(
        "--untrained",
        action="store_true",
        help="the config's own model before any training (the step-0 baseline); pick it with --preset/--set",
    )
    add_config_source(evaluate)
    evaluate.add_argument("--dataset", action="append", required=True, help="'builtin' or a FlashRAG JSONL/dir")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--limit", type=int, default=None, help="questions per benchmark")
    evaluate.add_argument(
        "--instruction", type=Path, help="instruction file (default: the checkpoint's best, or the seed if untrained)"
    )
    evaluate.add_argument("--json", type=Path, help="also write every answer with its scores to this JSON file")
    evaluate.add_argument(
        "--record",
        action="store_true",
        help="with --checkpoint: append the EM and F1 of each benchmark to the run's events.jsonl as eval_completed "
        "events of the checkpoint's step (what the plots and the web app's import read)",
    )
    add_cache(evaluate)

    serve = commands.add_parser("serve-retriever", help="serve Search-R1's POST /retrieve over a local index")
    serve.add_argument("--corpus", default="builtin", help="'builtin' or a FlashRAG corpus JSONL")
    serve.add_argument("--retriever", choices=["dense", "bm25"], default="dense")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    add_cache(serve)

    plot = commands.add_parser("plot", help="draw a run directory's Fig. 2 panels and population weights as PNGs")
    plot.add_argument("run_dir", type=Path, help="a run directory (holding events.jsonl)")

    add_experiment(commands.add_parser("experiment", help="arms × seeds on the same questions, with verdicts"))

    add_data(commands.add_parser("data", help="check data before a run: can the corpus answer the questions?"))

    verl = commands.add_parser("verl-config", help="print the verl (Hydra) overrides of a run config")
    add_config_source(verl)
    verl.add_argument("--model-size", choices=["3b", "7b"], help="the paper's Qwen2.5 policy: model, lr and turns")
    verl.add_argument("--n-gpus-per-node", type=int, default=8)
    verl.add_argument("--nnodes", type=int, default=1)
    return parser


def add_config_source(parser: argparse.ArgumentParser) -> None:
    """--preset / --config FILE / --set key=value: how every command that needs a config gets one."""
    parser.add_argument("--preset", default=None, choices=sorted(PRESETS), help="start from this preset (paper)")
    parser.add_argument("--config", type=Path, help="start from this JSON file instead of a preset")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field: a dotted path (grpo.lr=1e-6) or a paper name (lr=1e-6); values parse as JSON",
    )


def add_experiment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu-demo", choices=sorted(PRESETS), help="the base config (cpu-demo)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override for every arm"
    )
    meanings = "; ".join(f"{name}: {meaning}" for name, meaning in BUILTIN_ARM_MEANINGS.items())
    parser.add_argument(
        "--arms",
        default=",".join(BUILTIN_ARMS),
        help=f"built-in arms, comma-separated (all {len(BUILTIN_ARMS)}): {meanings}",
    )
    parser.add_argument(
        "--arm",
        dest="custom_arms",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="a custom arm (or overrides on top of a built-in one); repeat it to add overrides to the same arm",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 … N−1 for every arm (3)")
    parser.add_argument("--baseline", default="static", help="the arm every other is compared with (static)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run (1)")
    parser.add_argument("--out", type=Path, required=True, help="experiment directory: one run directory per run")
    parser.add_argument(
        "--eval-benchmark",
        dest="eval_benchmarks",
        action="append",
        default=[],
        help="'builtin' (the default) or a FlashRAG benchmark; repeat it for several: a verdict per benchmark and "
        "one over their unweighted average",
    )
    parser.add_argument("--eval-split", default="test")
    parser.add_argument("--eval-size", type=int, default=0, help="questions drawn from the split (0 = all)")
    parser.add_argument("--eval-seed", type=int, default=0, help="the seed that draws them (0)")
    add_cache(parser)


def add_data(parser: argparse.ArgumentParser) -> None:
    data_commands = parser.add_subparsers(dest="data_command", required=True)
    check = data_commands.add_parser(
        "check",
        help="print reachable_topk= (the share of questions whose gold answer is in the top-k passages retrieved for "
        "the question itself), reachable_anywhere= (in any passage) and, with --train, leaked= (questions also in "
        "the training split)",
    )
    check.add_argument("--questions", required=True, help="a FlashRAG questions JSONL (or 'builtin', its --split)")
    check.add_argument("--split", default="test", help="the split of 'builtin' or of a directory (test)")
    check.add_argument("--corpus", default="builtin", help="'builtin' or a FlashRAG corpus JSONL")
    check.add_argument("--retriever", choices=["bm25", "dense"], default="bm25")
    check.add_argument("--k", type=int, default=3, help="passages a search returns: the config's env.top_k (3)")
    check.add_argument("--train", help="a FlashRAG training questions JSONL: count the questions it repeats")
    check.add_argument(
        "--service", help="a retrieval service's address (manage.py retrieval_service); default: search here"
    )
    add_cache(check)


def add_cache(parser: argparse.ArgumentParser) -> None:
    default = cache_dir_from_env(os.environ)
    parser.add_argument("--cache-dir", type=Path, default=default, help="models and indexes (env INSPO_CACHE_DIR)")


def load_config(args: argparse.Namespace, fallback: RunConfig | None = None) -> RunConfig:
    if args.config:
        base = RunConfig.from_json(args.config.read_text(encoding="utf-8"))
    elif args.preset or fallback is None:
        base = preset(args.preset or "paper")
    else:
        base = fallback
    overrides = dict(parse_override(text) for text in args.overrides)
    return base.with_overrides(overrides) if overrides else base


# -- train ---------------------------------------------------------------------------------------------------


class ProgressSink:
    """A progress bar on stderr: step, reward, population size, the last evolution event, ETA."""

    def __init__(self, total: int, initial: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)
        self.population = 0
        self.note = ""

    def emit(self, event: Event) -> None:
        if isinstance(event, PopulationChanged):
            self.population = len(event.members)
        elif isinstance(event, EvolutionCompleted):
            self.note = f"step {event.step}: +{len(event.added_ids)} verified"
        elif isinstance(event, InstructionPruned):
            self.note = f"step {event.step}: pruned {event.instruction_id}"
        elif isinstance(event, BudgetExhausted | OptimizerFailed):
            self.note = f"step {event.step}: {event.kind.replace('_', ' ')}"
        elif isinstance(event, CheckpointSaved):
            self.bar.write(f"checkpoint: {event.path} (checkpoints on disk: {event.disk_bytes / 1e9:.2f} GB)")
        elif isinstance(event, PopulationCollapsed):
            why = " and ".join(
                {"cosine": "its instructions alike", "entropy": "sampling on few"}[r] for r in event.reasons
            )
            self.bar.write(
                f"warning: the population collapsed at step {event.step} ({why}) since step {event.since_step}"
            )
        elif isinstance(event, PopulationRecovered):
            self.bar.write(f"the population recovered at step {event.step}")
        elif isinstance(event, EvalCompleted):
            self.bar.write(f"eval step {event.step} {event.benchmark}: {event.metric}={event.value:.3f} (n={event.n})")
        elif isinstance(event, StepCompleted):
            self.bar.set_postfix_str(f"reward={event.reward_mean:.3f} |P|={self.population} {self.note}".strip())
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def stop_on_interrupt() -> Callable[[], bool]:
    """First Ctrl-C: finish the step, save a checkpoint, exit. Second: stop at once."""
    requested = {"stop": False}

    def handler(signum: int, frame: FrameType | None) -> None:
        if requested["stop"]:
            raise KeyboardInterrupt
        requested["stop"] = True
        print("\ninterrupted: finishing this step and saving a checkpoint (Ctrl-C again to abort)", file=sys.stderr)

    signal.signal(signal.SIGINT, handler)
    return lambda: requested["stop"]


def command_train(args: argparse.Namespace) -> int:
    from .build import build_run

    out: Path = args.out
    saved = out / "config.json"
    checkpoint = latest_checkpoint(out) if args.resume else None
    if args.resume and checkpoint is None:
        raise UsageError(f"--resume: no checkpoint under {out / CHECKPOINTS_DIR}")
    fallback = RunConfig.from_json(saved.read_text(encoding="utf-8")) if args.resume and saved.exists() else None
    config = load_config(args, fallback)
    out.mkdir(parents=True, exist_ok=True)
    saved.write_text(config.to_json(), encoding="utf-8")
    events = JsonlSink(out / "events.jsonl")
    loop = build_run(
        config,
        out_dir=out,
        cache_dir=args.cache_dir,
        sink=events,
        api_key=api_key_from_env(config.optimizer, os.environ),
        should_stop=stop_on_interrupt(),
        control=FileControlChannel(out),
    )
    if checkpoint is not None:
        loop.load_checkpoint(checkpoint)
    progress = ProgressSink(loop.total_steps, loop.progress.step)
    trackers = _trackers(config, out, events)
    loop.sink = FanoutSink(events, progress, *trackers)
    try:
        result = loop.run()
    finally:
        progress.close()
        for tracker in trackers:
            tracker.close()
        events.close()
    (out / "best_instruction.txt").write_text(result.best_instruction.text + "\n", encoding="utf-8")
    _plot_quietly(out)
    print(f"{result.status} at step {result.step}. Results in {out}/:")
    print(f"  events.jsonl, fig2.png, population.png, best_instruction.txt ({result.best_instruction.id}),")
    print(f"  checkpoint {result.checkpoint}")
    return 0 if result.status == "finished" else 130


def _trackers(config: RunConfig, out: Path, warn: EventSink) -> list[TrackingSink]:
    """The experiment trackers of `tracking.backends` (none: an empty list); W&B gets WANDB_API_KEY when it is set
    and runs offline otherwise."""
    if not config.tracking.backends:
        return []
    missing = package_errors(config.tracking)
    if missing:
        raise UsageError("; ".join(str(error) for error in missing))
    wandb_key, mlflow_token = os.environ.get("WANDB_API_KEY"), os.environ.get("MLFLOW_TRACKING_TOKEN")
    return [TrackingSink(config, out, run_name=out.name, warn=warn, wandb_key=wandb_key, mlflow_token=mlflow_token)]


def _plot_quietly(out: Path) -> None:
    """The run's pictures; a run that trained is never failed by a drawing problem (it is reported instead)."""
    from .plots import plot_run

    try:
        plot_run(out)
    except (ValueError, OSError, ImportError) as error:
        print(f"no plots: {error}", file=sys.stderr)


def command_plot(args: argparse.Namespace) -> int:
    from .plots import plot_run

    if not (args.run_dir / "events.jsonl").exists():
        raise UsageError(f"{args.run_dir} is not a run directory (no events.jsonl)")
    for path in plot_run(args.run_dir):
        print(path)
    return 0


# -- control -------------------------------------------------------------------------------------------------


def command_control(args: argparse.Namespace) -> int:
    """Append a request to the run directory's control file (the run reads it before its next step), or list the
    requests with the outcomes its events.jsonl holds."""
    channel = FileControlChannel(args.out)
    if args.control_command == "list":
        events = args.out / "events.jsonl"
        handled = {}
        if events.exists():
            handled = {e.request_id: e for e in read_events(events) if isinstance(e, ControlHandled)}
        for request in channel.poll():
            outcome = handled.get(request.id)
            said = f"{outcome.status} before step {outcome.step}: {outcome.message}" if outcome else "pending"
            print(json.dumps(request_to_dict(request), ensure_ascii=False), "→", said)
        return 0
    if not args.out.is_dir():
        raise UsageError(f"{args.out} is not a run directory")
    author = args.author if args.author is not None else getpass.getuser()
    action: Inject | Pin | Unpin | Retire
    if args.control_command == "inject":
        action = Inject(args.text, author, verify=not args.no_verify)
    else:
        action = TARGETED[args.control_command](args.instruction_id, author)
    request_id = f"cli-{len(channel.poll()) + 1}"
    channel.append(ControlRequest(request_id, action))
    print(f"request {request_id} queued: {args.control_command}; the run handles it before its next step")
    return 0


# -- eval ----------------------------------------------------------------------------------------------------


def command_eval(args: argparse.Namespace) -> int:
    from .build import checkpoint_policy
    from .evaluate import answer_scores, checkpoint_best, evaluate_checkpoint

    if args.record and (args.checkpoint is None or args.instruction):
        raise UsageError("--record needs --checkpoint and the checkpoint's own I* (no --instruction)")
    config, policy_dir, instruction = _eval_source(args)
    if args.instruction:
        instruction = args.instruction.read_text(encoding="utf-8").strip()
    best = checkpoint_best(args.checkpoint, config) if instruction is None else None
    if best is not None:
        instruction = best.text
    assert instruction is not None
    policy = checkpoint_policy(config, policy_dir, args.cache_dir)
    sink = JsonlSink(args.checkpoint.parent.parent / "events.jsonl") if args.record else None
    print("| benchmark | n | EM | F1 | answered | well-formed | tool calls |\n|---|---|---|---|---|---|---|")
    answers: dict[str, list[dict[str, Any]]] = {}
    for result in evaluate_checkpoint(policy, instruction, args.dataset, split=args.split, limit=args.limit):
        answers[result.benchmark] = [t.to_dict() | answer_scores([t]) for t in result.trajectories]
        row = " | ".join(f"{result.scores[key]:.3f}" for key in ("em", "f1", "answered", "format", "tool_calls"))
        print(f"| {result.benchmark} | {len(result.trajectories)} | {row} |")
        if sink is not None and best is not None:
            for metric in ("em", "f1"):
                sink.emit(
                    EvalCompleted(
                        step=checkpoint_step(args.checkpoint),
                        benchmark=result.benchmark,
                        metric=metric,
                        value=result.scores[metric],
                        n=len(result.trajectories),
                        instruction_id=best.id,
                        checkpoint=str(args.checkpoint),
                    )
                )
    if sink is not None:
        sink.close()
    if args.json:
        args.json.write_text(json.dumps({"instruction": instruction, "answers": answers}, indent=1), encoding="utf-8")
    return 0


def _eval_source(args: argparse.Namespace) -> tuple[RunConfig, Path | None, str | None]:
    """(config, policy directory or None for the config's own model, instruction or None for the checkpoint's I*)."""
    if args.untrained:
        config = load_config(args, fallback=preset("cpu-demo"))
        return config, None, config.population.seed_instruction
    state_file = args.checkpoint / STATE_FILE
    if not state_file.exists():
        raise UsageError(f"{args.checkpoint} is not a checkpoint (no {STATE_FILE})")
    config = RunConfig.from_dict(read_state(args.checkpoint)["config"])
    return load_config(args, fallback=config), args.checkpoint / POLICY_DIR, None


# -- serve-retriever ---------------------------------------------------------------------------------------------


def command_serve(args: argparse.Namespace) -> int:
    from .env.indexes import CorpusIndex, build_index, corpus_file
    from .env.retrievers import embed_texts
    from .env.server import serve_forever

    root = args.cache_dir / "indexes"
    encode = embed_texts if args.retriever == "dense" else None
    folder = build_index(args.retriever, corpus_file(args.corpus, root), root, encode=encode, progress=_index_progress)
    serve_forever(CorpusIndex(folder, encode=encode), args.host, args.port)
    return 0


def _index_progress(done: int, total: int) -> None:
    if done == total or done % 100_000 == 0:
        print(f"indexed {done:,} of {total:,} passages", file=sys.stderr, flush=True)


# -- data check ------------------------------------------------------------------------------------------------


def command_data(args: argparse.Namespace) -> int:
    """`data check`: one line of shares on stdout (what a checker reads), the counts behind them on stderr."""
    from .env.datasets import load_questions
    from .env.indexes import count_lines
    from .env.reach import reachability
    from .env.retrievers import RetrieverError

    if not 1 <= args.k <= 100:
        raise UsageError("--k must be from 1 to 100")
    questions = load_questions(args.questions, args.split)
    if not questions:
        raise UsageError(f"{args.questions} holds no questions")
    retriever, corpus = _check_retriever(args)
    try:
        result = reachability(questions, corpus, retriever, args.k, corpus_lines=count_lines(corpus))
    except RetrieverError as error:
        raise UsageError(str(error)) from error
    line = result.line()
    if args.train:
        line += f" leaked={_leaked(load_questions(args.train, 'train'), questions)}"
    print(
        f"{result.questions} questions, top {result.k} by {args.retriever}: {result.topk} reached there, "
        f"{result.anywhere} anywhere in {corpus.name}",
        file=sys.stderr,
    )
    print(line)
    return 0


def _check_retriever(args: argparse.Namespace) -> tuple[Any, Path]:
    """The retriever over the corpus's index (built under --cache-dir when there is none, or searched by the service
    at --service), and the corpus file."""
    from .env.indexes import CorpusIndex, build_index, corpus_file, index_name
    from .env.retrievers import RemoteRetriever, embed_texts
    from .env.store import corpus_digest

    root = args.cache_dir / "indexes"
    corpus = corpus_file(args.corpus, root)
    encode = embed_texts if args.retriever == "dense" else None
    if args.service:
        name = index_name(args.retriever, corpus_digest(corpus))
        return RemoteRetriever(f"{args.service.rstrip('/')}/indexes/{name}/retrieve"), corpus
    folder = build_index(args.retriever, corpus, root, encode=encode, progress=_index_progress)
    return CorpusIndex(folder, encode=encode), corpus


def _leaked(train: list[Any], evaluation: list[Any]) -> int:
    """How many of the evaluation questions the training split repeats, exactly or nearly (see `overlap`)."""
    from .env.overlap import find_overlap

    return len({o.evaluation_index for o in find_overlap([q.text for q in train], [q.text for q in evaluation])})


# -- experiment ------------------------------------------------------------------------------------------------


_OVERRIDE_SEPARATOR = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_.]*=)")
"""The commas between a custom arm's KEY=VALUE pairs: those followed by the next key (a value may hold commas)."""


def experiment_of(args: argparse.Namespace) -> Experiment:
    """The experiment the arguments describe, validated (ConfigError names each bad field)."""
    arms: dict[str, dict[str, Any]] = {name.strip(): {} for name in args.arms.split(",") if name.strip()}
    for text in args.custom_arms:
        name, sep, rest = text.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--arm {text!r} must look like NAME:KEY=VALUE,...")
        pairs = [parse_override(item) for item in _OVERRIDE_SEPARATOR.split(rest) if item.strip()]
        arms.setdefault(name.strip(), {}).update(dict(pairs))
    return experiment_from_dict(
        {
            "preset": args.preset,
            "overrides": dict(parse_override(text) for text in args.overrides),
            "arms": arms,
            "seeds": args.seeds,
            "evaluation": {
                "benchmarks": args.eval_benchmarks or ["builtin"],
                "split": args.eval_split,
                "size": args.eval_size,
                "sample_seed": args.eval_seed,
            },
            "baseline": args.baseline,
        }
    )


def command_experiment(args: argparse.Namespace) -> int:
    """Train every (arm, seed) not finished yet, `--jobs` at a time, then write the results and the pictures."""
    from .experiments import read_experiment, results_markdown
    from .plots import plot_experiment

    if not 1 <= args.jobs <= 64:
        raise UsageError("--jobs must be from 1 to 64")
    if not 1 <= args.threads <= 256:
        raise UsageError("--threads must be from 1 to 256")
    experiment = experiment_of(args)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(experiment.to_dict(), indent=2), encoding="utf-8")
    runs = [ExperimentRun.prepare(experiment, arm, seed, out) for arm, seed in experiment.runs()]
    interrupted = False
    try:
        run_all(runs, jobs=args.jobs, threads=args.threads, cache_dir=args.cache_dir)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: the runs saved a checkpoint; the same command resumes them", file=sys.stderr)
    results = read_experiment(experiment, out)
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    (out / "results.md").write_text(results_markdown(results), encoding="utf-8")
    try:
        pictures = plot_experiment(results, out)
    except (ValueError, OSError, ImportError) as error:
        pictures = []
        print(f"no plots: {error}", file=sys.stderr)
    print(results_markdown(results))
    print(f"Results in {out}/: results.json, results.md, {', '.join(p.name for p in pictures)}")
    return 130 if interrupted else (0 if results["complete"] else 1)


class ExperimentRun:
    """One (arm, seed) of an experiment as a training subprocess: its directory, config and progress."""

    def __init__(self, name: str, directory: Path, total: int, done: bool) -> None:
        self.name = name
        self.directory = directory
        self.total = total
        self.done = done
        self.step = total if done else 0
        self.offset = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None

    @classmethod
    def prepare(cls, experiment: Experiment, arm: str, seed: int, out: Path) -> ExperimentRun:
        """The run's directory with its config; refused when an earlier run there had another config."""
        from .experiments import arm_config, read_run, run_name
        from .schedule import phases_for

        config = arm_config(experiment, arm, seed)
        directory = out / run_name(arm, seed)
        saved = directory / "config.json"
        if saved.exists() and not _same_config(saved, config):
            raise UsageError(f"{directory} holds a run of another config: give another --out, or delete it")
        directory.mkdir(parents=True, exist_ok=True)
        saved.write_text(config.to_json(), encoding="utf-8")
        outcome = read_run(directory, experiment.evaluation.benchmarks)
        run = cls(run_name(arm, seed), directory, sum(p.steps for p in phases_for(config)), outcome.finished)
        run.step = run.total if outcome.finished else 0
        return run

    def start(self, cache_dir: Path, threads: int = 1) -> None:
        """`train --resume` from the newest checkpoint that kept the optimizer state (see
        `checkpoint.optimizer_state`), or a fresh start in a cleared directory."""
        checkpoint = latest_checkpoint(self.directory)
        resume = checkpoint is not None and (checkpoint / OPTIMIZER_DIR).is_dir()
        if not resume:
            for stale in ("events.jsonl", "evaluations", CHECKPOINTS_DIR):
                path = self.directory / stale
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        command = [sys.executable, "-m", "inspo_engine", "train", "--config", str(self.directory / "config.json")]
        command += ["--out", str(self.directory), "--cache-dir", str(cache_dir), *(["--resume"] if resume else [])]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        env["TOKENIZERS_PARALLELISM"] = "false"
        with (self.directory / "train.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def poll(self) -> bool:
        """Read the steps its events.jsonl gained; True once the process has ended."""
        self.step = max(self.step, _last_step(self.directory / "events.jsonl", self))
        assert self.process is not None
        self.returncode = self.process.poll()
        if self.returncode is not None:
            self.done = True
        return self.returncode is not None


def _same_config(saved: Path, config: RunConfig) -> bool:
    """Whether a saved config.json is `config`, fields added to the schema since it was written taking defaults."""
    try:
        return RunConfig.from_json(saved.read_text(encoding="utf-8")).to_dict() == config.to_dict()
    except ConfigError:
        return False


def _last_step(path: Path, run: ExperimentRun) -> int:
    """The highest step_completed in the lines appended since the last read (`run.offset` remembers where)."""
    if not path.exists():
        return 0
    with path.open("rb") as file:
        file.seek(run.offset)
        data = file.read()
    complete = data[: data.rfind(b"\n") + 1]
    run.offset += len(complete)
    steps = [0]
    for line in complete.splitlines():
        if b'"step_completed"' in line:
            steps.append(int(json.loads(line)["step"]))
    return max(steps)


def run_all(runs: list[ExperimentRun], *, jobs: int, cache_dir: Path, threads: int = 1) -> None:
    """Start the unfinished runs, `jobs` at a time with `threads` torch threads each, with one progress bar over
    runs and steps."""
    from tqdm import tqdm

    waiting = [run for run in runs if not run.done]
    active: list[ExperimentRun] = []
    total, initial = sum(run.total for run in runs), sum(run.step for run in runs)
    _stop_runs_on_sigterm(active)
    with tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr) as bar:
        try:
            while waiting or active:
                while waiting and len(active) < jobs:
                    active.append(waiting.pop(0))
                    active[-1].start(cache_dir, threads)
                for run in [r for r in active if r.poll()]:
                    active.remove(run)
                    if run.returncode != 0:
                        log = run.directory / "train.log"
                        bar.write(f"{run.name} failed (exit {run.returncode}): see {log}", file=sys.stderr)
                bar.n = sum(min(run.step, run.total) for run in runs)
                finished = sum(run.done and run.returncode in (None, 0) for run in runs)
                bar.set_description(f"runs {finished}/{len(runs)} done, {len(active)} running")
                bar.refresh()
                time.sleep(1.0)
        except KeyboardInterrupt:
            for run in active:
                if run.process is not None:
                    run.process.wait()
            raise


def _stop_runs_on_sigterm(active: list[ExperimentRun]) -> None:
    """SIGTERM to the experiment reaches its runs as the Ctrl-C that `train` answers with a checkpoint (Ctrl-C at a
    terminal reaches them by itself), and then stops the experiment as Ctrl-C does."""

    def handler(signum: int, frame: FrameType | None) -> None:
        for run in active:
            if run.process is not None and run.process.poll() is None:
                run.process.send_signal(signal.SIGINT)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# -- verl-config ---------------------------------------------------------------------------------------------


def command_verl_config(args: argparse.Namespace) -> int:
    from .backends.verl.overrides import MODEL_SIZES, Cluster, describe, verl_overrides

    config = load_config(args)
    if args.model_size:
        config = config.with_overrides(MODEL_SIZES[args.model_size])
    cluster = Cluster(n_gpus_per_node=args.n_gpus_per_node, nnodes=args.nnodes)
    print(describe(verl_overrides(config, cluster=cluster)))
    return 0


# -- main ----------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "train": command_train,
        "control": command_control,
        "eval": command_eval,
        "serve-retriever": command_serve,
        "verl-config": command_verl_config,
        "plot": command_plot,
        "experiment": command_experiment,
        "data": command_data,
    }
    try:
        if args.command == "config":
            print(load_config(args).to_json() if args.config_command == "show" else "\n".join(field_paths()))
            return 0
        return commands[args.command](args)
    except ConfigError as error:
        return fail("invalid config:", [str(item) for item in error.errors])
    except (UsageError, OSError, ValueError) as error:
        return fail(f"error: {error}", [])


def fail(headline: str, lines: list[Any]) -> int:
    print(headline, file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
