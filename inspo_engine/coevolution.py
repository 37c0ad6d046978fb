"""Algorithm 1 of INSPO: the schedule that ties the population, the replay buffer, a policy backend and an optimizer
LLM together (sample → rollout → attribute → update → prune → evolve → verify), and the run's progress and state.

Two drivers walk the same step API: `run()` (the torch path, this module's own loop) and verl's trainer
(`backends.verl.loop`). Per step: `begin_step` samples the instructions, the driver rolls out and updates,
`end_step` attributes rewards and emits the step, `step_boundary` prunes / evolves / evaluates / checkpoints on
their schedules; `start` and `finish` open and close the run. How the population changes is `evolution`'s, where
checkpoints go is `checkpoints`'; it knows nothing about how a backend generates text or how an optimizer is
reached.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoints import (
    OPTIMIZER_DIR,
    checkpoint_path,
    complete_checkpoints,
    directory_bytes,
    drop_old_checkpoints,
    drop_optimizer_state,
    read_state,
    write_checkpoint,
)
from .config import EnvConfig, RunConfig
from .control import ControlChannel, NoControl, Steering
from .env.rewards import REWARD_PARTS, exact_match, is_valid_format
from .events import (
    CheckpointSaved,
    EvalCompleted,
    EvalProgress,
    EventSink,
    Overhead,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuperseded,
    StageStarted,
    StepCompleted,
    TrajectoriesSampled,
    TrajectoryRecord,
)
from .evolution import Evolution, Ledger
from .machine import describe as describe_machine
from .machine import peak_rss_kib
from .optimizers.base import OptimizerBudget, OptimizerClient
from .policy import PolicyBackend
from .population import Instruction, Population
from .replay import ReplayBuffer
from .schedule import Phase, needs_optimizer, phases_for
from .types import Question, RolloutRequest, Trajectory

STATE_SCHEMA_VERSION = 1
__all__ = ["CoEvolution", "RunResult", "evaluation_file", "read_answers", "write_answers"]


@dataclass
class RunResult:
    """What a finished (or stopped) run hands back."""

    status: str
    step: int
    best_instruction: Instruction
    checkpoint: Path | None


@dataclass
class _Progress:
    """Where the run stands: global step, phase position, and the data order's position."""

    step: int = 0
    phase_index: int = 0
    phase_step: int = 0
    epoch: int = 0
    position: int = 0


class CoEvolution:
    """One INSPO run. Build it, optionally `load_checkpoint`, then `run()` — or drive the step API yourself."""

    def __init__(
        self,
        config: RunConfig,
        *,
        backend: PolicyBackend,
        train_questions: Sequence[Question],
        optimizer: OptimizerClient | None,
        sink: EventSink,
        out_dir: Path | None = None,
        eval_sets: Mapping[str, Sequence[Question]] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        owns_run: Callable[[], bool] = lambda: True,
        control: ControlChannel | None = None,
        benchmark_names: Mapping[str, str] | None = None,
    ) -> None:
        """`should_stop` is asked after every step (True: stop there, with a checkpoint). `owns_run` is asked
        before every checkpoint write: False means another process has taken the run over, and the loop raises
        RunSuperseded instead of writing. `control` is polled before each step's instructions are sampled (see
        `control`). `benchmark_names` maps an evaluation set's key (a local path) to the name its files in the run
        directory take (the data reference it was fetched from); a key it lacks names them itself."""
        config.validate()
        if not train_questions:
            raise ValueError("no training questions")
        if optimizer is None and needs_optimizer(config):
            raise ValueError("this config evolves instructions but no optimizer client was given")
        self.config = config
        self.backend = backend
        self.questions = list(train_questions)
        self.optimizer = optimizer
        self.out_dir = out_dir
        self.eval_sets = dict(eval_sets or {})
        self.benchmark_names = dict(benchmark_names or {})
        self.should_stop = should_stop
        self.owns_run = owns_run
        pop = config.population
        self.population = Population(
            max_size=pop.population_size,
            n_parents=pop.n_parents,
            temperature=pop.temperature,
            weight_window=pop.weight_window,
            weighted=config.mode != "random-pool",
        )
        self.replay = ReplayBuffer(config.evolution.replay_capacity)
        self.sample_rng = random.Random(config.seed)
        self.replay_rng = random.Random(config.seed + 1)
        self.progress = _Progress()
        self.phases = phases_for(config)
        self.ledger = Ledger()
        self.evolution = Evolution(
            config,
            population=self.population,
            replay=self.replay,
            backend=backend,
            optimizer=optimizer,
            sink=sink,
            rng=self.replay_rng,
            ledger=self.ledger,
        )
        self.sink = sink
        self.control: ControlChannel = control or NoControl()
        self.steering = Steering(config, self.evolution)

    @property
    def sink(self) -> EventSink:
        """Where every event goes (evolution's too); replaceable before the run starts."""
        return self._sink

    @sink.setter
    def sink(self, sink: EventSink) -> None:
        self._sink = self.evolution.sink = sink

    @property
    def budget(self) -> OptimizerBudget:
        """The optimizer calls and tokens spent so far, against the config's caps."""
        return self.evolution.budget

    @property
    def total_steps(self) -> int:
        return sum(phase.steps for phase in self.phases)

    @property
    def phase(self) -> Phase:
        """The phase the current step belongs to."""
        return self.phases[self.progress.phase_index]

    # -- the run (the torch path) ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Start (with `eval.eval_at_start`, a fresh run first evaluates the untrained policy as step 0), every
        phase's steps (asking `should_stop` after each), finish; RunFailed when it raises."""
        try:
            self.start()
            if self.config.eval.eval_at_start and not self.progress.step and self.eval_sets:
                self._evaluate(0)
            return self.finish(self._run_phases())
        except RunSuperseded:
            raise
        except Exception as error:
            self.fail(error)
            raise

    def _run_phases(self) -> str:
        while self.progress.phase_index < len(self.phases):
            phase = self.phase
            while self.progress.phase_step < phase.steps:
                self._step()
                if self.should_stop():
                    return "cancelled"
            self._enter_next_phase(phase)
        return "finished"

    def _step(self) -> None:
        cfg, phase = self.config, self.phase
        questions = self._next_questions(cfg.grpo.batch_size)
        chosen = self.begin_step(len(questions))
        step = self.progress.step
        self._stage(step, "rollout")
        started = time.perf_counter()
        requests = [RolloutRequest(ins.id, ins.text, q) for ins, q in zip(chosen, questions, strict=True)]
        groups = self.backend.rollout(requests, cfg.grpo.group_size)
        timings = {"rollout": time.perf_counter() - started}
        metrics: dict[str, float] = {}
        if phase.train:
            self._stage(step, "update")
            result = self.backend.update(groups)
            metrics, timings = dict(result.metrics), {**timings, **result.timings}
        self.end_step(groups, chosen, metrics=metrics, timings=timings)
        self.step_boundary()

    def _enter_next_phase(self, finished: Phase) -> None:
        """Between phases: after `pre` optimisation only I* trains; before `post` optimisation the population
        is initialised against the trained policy."""
        self.progress.phase_index += 1
        self.progress.phase_step = 0
        if self.progress.phase_index >= len(self.phases):
            return
        following = self.phase
        if finished.evolve and not following.evolve:
            self.evolution.freeze(self.progress.step)
        elif following.evolve and not finished.evolve:
            self.evolution.refill(self.progress.step)

    def _next_questions(self, n: int) -> list[Question]:
        """The next n questions of a per-epoch shuffle derived from the seed, so resuming needs two integers."""
        batch: list[Question] = []
        while len(batch) < n:
            order = list(range(len(self.questions)))
            random.Random(f"{self.config.seed}:{self.progress.epoch}").shuffle(order)
            take = order[self.progress.position : self.progress.position + n - len(batch)]
            batch += [self.questions[i] for i in take]
            self.progress.position += len(take)
            if self.progress.position >= len(self.questions):
                self.progress.epoch += 1
                self.progress.position = 0
        return batch

    # -- the step API ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """RunStarted (with the step a restored state resumes from); a new run builds its initial population."""
        self.sink.emit(
            RunStarted(
                config=self.config.to_dict(),
                resumed_from_step=self.progress.step,
                backend=self.backend.name,
                optimizer_model=self.optimizer.model if self.optimizer else None,
                machine=describe_machine(),
                precision=self.backend.computes_in,
            )
        )
        if not self.progress.step and not self.population.members:
            self.evolution.initialise()

    def begin_step(self, n: int, step: int | None = None) -> list[Instruction]:
        """Enter the next step (or `step`, for a driver that counts steps itself): apply the control requests that
        are due, then sample one instruction per question, by softmax(w/τ) with the run's sampling rng."""
        entered = self.progress.step + 1 if step is None else step
        self.progress.phase_step += entered - self.progress.step
        self.progress.step = entered
        self.steering.apply(self.control, entered)
        return self.population.sample(self.sample_rng, n)

    def end_step(
        self,
        groups: Sequence[Sequence[Trajectory]],
        chosen: Sequence[Instruction],
        *,
        metrics: Mapping[str, float],
        timings: Mapping[str, float],
    ) -> None:
        """After the step's rollouts (and update): each instruction gets the mean reward of the groups it was used
        for, the trajectories go to the replay buffer, and the step's events go out."""
        step, phase = self.progress.step, self.phase
        self._attribute(step, groups)
        flat = [t for group in groups for t in group]
        self.ledger.charge(**{"training_rollouts" if phase.train else "verification_rollouts": len(flat)})
        self.replay.add(step, flat)
        self._emit_step(step, phase, flat, chosen, metrics, timings)
        self.evolution.emit_population(step, "step")

    def step_boundary(self) -> None:
        """After the current step's update: prune, evolve → verify (with the updated policy), evaluate and
        checkpoint, each on its schedule."""
        cfg, phase, step, local = self.config, self.phase, self.progress.step, self.progress.phase_step
        if phase.evolve and cfg.population.prune and local % cfg.population.prune_every == 0:
            self.evolution.prune(step)
        if phase.evolve and local in cfg.evolution_steps(phase.steps):
            self.evolution.evolve(step)
        if phase.train and cfg.eval.eval_every and local % cfg.eval.eval_every == 0 and local < phase.steps:
            self._evaluate(step)
        every = cfg.checkpoint.checkpoint_every
        if self.out_dir and every and step % every == 0 and step < self.total_steps:
            self.save_checkpoint()

    def finish(self, status: str) -> RunResult:
        """The end of a run ('finished' or 'cancelled'): the final evaluation (finished), the last checkpoint and
        RunFinished."""
        step = self.progress.step
        if status == "finished" and self.eval_sets:
            self._evaluate(step)
        checkpoint = self.save_checkpoint(resumable=status != "finished") if self.out_dir else None
        best = self.population.best()
        self.sink.emit(
            RunFinished(
                step=step,
                status=status,
                best_instruction_id=best.id,
                best_instruction=best.text,
                overhead=self.ledger.overhead,
                peak_rss_kib=peak_rss_kib(),
            )
        )
        return RunResult(status=status, step=step, best_instruction=best, checkpoint=checkpoint)

    def fail(self, error: BaseException) -> None:
        """RunFailed at the current step, naming the error."""
        self.sink.emit(RunFailed(step=self.progress.step, error=f"{type(error).__name__}: {error}"))

    # -- inside a step ---------------------------------------------------------------------------------------

    def _attribute(self, step: int, groups: Sequence[Sequence[Trajectory]]) -> None:
        """Each instruction gets the mean reward of the groups it was used for in this step."""
        by_instruction: dict[str, list[float]] = defaultdict(list)
        for group in groups:
            by_instruction[group[0].instruction_id].append(statistics.fmean(t.reward for t in group))
        self.population.record_step(step, by_instruction)

    def _evaluate(self, step: int) -> None:
        """I* answers every evaluation set: the mean EM and F1 and every question's result go out as EvalCompleted,
        and into the run directory's `evaluations/` (see `evaluation_file`)."""
        best = self.population.best()
        total, done = sum(len(questions) for questions in self.eval_sets.values()), 0
        for name, questions in self.eval_sets.items():
            self._stage(step, "evaluate")
            self.sink.emit(EvalProgress(step=step, done=done, total=total, benchmark=name))
            results = []
            for start in range(0, len(questions), EVAL_CHUNK):
                results += self.backend.evaluate(best.text, questions[start : start + EVAL_CHUNK])
                done += len(questions[start : start + EVAL_CHUNK])
                self.sink.emit(EvalProgress(step=step, done=done, total=total, benchmark=name))
            answers = [result.to_dict() for result in results]
            if self.out_dir is not None:
                write_answers(evaluation_file(self.out_dir, step, self.benchmark_names.get(name, name)), answers)
            self.sink.emit(
                EvalCompleted(
                    step=step,
                    benchmark=name,
                    metric="em",
                    value=statistics.fmean(r.em for r in results) if results else 0.0,
                    n=len(results),
                    instruction_id=best.id,
                    f1=statistics.fmean(r.f1 for r in results) if results else 0.0,
                    answers=answers,
                )
            )

    def _stage(self, step: int, stage: str) -> None:
        self.sink.emit(StageStarted(step=step, stage=stage))

    def _emit_step(
        self,
        step: int,
        phase: Phase,
        flat: list[Trajectory],
        chosen: Sequence[Instruction],
        metrics: Mapping[str, float],
        timings: Mapping[str, float],
    ) -> None:
        rewards = [t.reward for t in flat]
        self.sink.emit(
            StepCompleted(
                step=step,
                total_steps=self.total_steps,
                phase=phase.name,
                reward_mean=statistics.fmean(rewards),
                reward_std=statistics.pstdev(rewards),
                tool_calls_mean=statistics.fmean(t.tool_calls for t in flat),
                response_length_mean=statistics.fmean(t.response_tokens for t in flat),
                instruction_length_mean=statistics.fmean(len(ins.text.split()) for ins in chosen),
                metrics={**protocol_metrics(flat), **reward_split(flat, self.config.env), **metrics},
                timings=dict(timings),
                overhead=self.ledger.overhead,
            )
        )
        n_log = self.config.log_trajectories
        if n_log:
            stride = max(1, len(flat) // n_log)
            picked = [TrajectoryRecord(**t.to_dict()) for t in flat[::stride][:n_log]]
            self.sink.emit(TrajectoriesSampled(step=step, trajectories=picked))

    # -- checkpoints ---------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The loop's whole state: enough, with the backend's own, to continue exactly."""
        progress, evolution = self.progress, self.evolution
        return {
            "schema_version": STATE_SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "progress": {
                "step": progress.step,
                "phase_index": progress.phase_index,
                "phase_step": progress.phase_step,
                "epoch": progress.epoch,
                "position": progress.position,
                "budget_reported": evolution.budget_reported,
                "overhead": self.ledger.overhead.__dict__,
                "round": evolution.rounds,
            },
            "population": self.population.to_state(),
            "replay": self.replay.to_state(),
            "budget": evolution.budget.to_state(),
            "rngs": {"sample": _rng_state(self.sample_rng), "replay": _rng_state(self.replay_rng)},
            "diversity": evolution.diversity_state(),
            "control": self.steering.to_state(),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        version = state.get("schema_version")
        if version != STATE_SCHEMA_VERSION:
            raise ValueError(
                f"checkpoint state has schema_version {version!r}; this engine reads {STATE_SCHEMA_VERSION}"
            )
        data = dict(state["progress"])
        self.evolution.rounds = int(data.pop("round"))
        self.evolution.budget_reported = bool(data.pop("budget_reported"))
        self.ledger.overhead = Overhead(**data.pop("overhead"))
        self.progress = _Progress(**data)
        self.population.load_state(state["population"])
        self.replay.load_state(state["replay"])
        self.evolution.budget = OptimizerBudget.from_state(state["budget"])
        self.sample_rng.setstate(_rng_from_state(state["rngs"]["sample"]))
        self.replay_rng.setstate(_rng_from_state(state["rngs"]["replay"]))
        self.evolution.load_diversity_state(state.get("diversity"))
        self.steering.load_state(state.get("control", {}))

    def save_checkpoint(self, *, resumable: bool = True) -> Path:
        """The backend's policy and this loop's state as the checkpoint of the current step (see `checkpoints`);
        older ones beyond keep_last are deleted, and with optimizer_state 'latest' only the newest checkpoint of a
        run that can still resume keeps the optimizer state (`resumable` False: the run ran all its steps)."""
        assert self.out_dir is not None, "no out_dir to save checkpoints in"
        step, retention = self.progress.step, self.config.checkpoint
        if not self.owns_run():
            raise RunSuperseded(f"another process owns this run now; the checkpoint of step {step} is not written")
        self._stage(step, "checkpoint")
        directory = checkpoint_path(self.out_dir, step)
        keep_optimizer = resumable or retention.optimizer_state == "all"
        size = write_checkpoint(directory, self.state(), self.backend.save, optimizer_state=keep_optimizer)
        drop_old_checkpoints(self.out_dir, retention.keep_last)
        if retention.optimizer_state == "latest":
            drop_optimizer_state(self.out_dir, keep=1 if keep_optimizer else 0)
        self.sink.emit(
            CheckpointSaved(
                step=step,
                path=str(directory),
                bytes=size,
                optimizer_bytes=directory_bytes(directory / OPTIMIZER_DIR),
                disk_bytes=sum(directory_bytes(p) for p in complete_checkpoints(self.out_dir)),
            )
        )
        return directory

    def load_checkpoint(self, directory: Path) -> None:
        self.load_state(read_state(directory))
        self.backend.load(directory)


EVALUATIONS_DIR = "evaluations"
EVAL_CHUNK = 32
"""Questions an evaluation hands the backend at a time, with an EvalProgress after each chunk: the torch backend's
own answer batch (`score_batch`), so answering in chunks generates exactly the batches one call would."""


def evaluation_file(out_dir: Path, step: int, benchmark: str) -> Path:
    """Where a run keeps one evaluation's per-question results: `evaluations/step-NNNNNN-<benchmark>.jsonl`, the
    benchmark's name made safe for a file name (a FlashRAG path keeps its parts, joined by '_').

    >>> evaluation_file(Path("run"), 40, "builtin").as_posix()
    'run/evaluations/step-000040-builtin.jsonl'
    >>> evaluation_file(Path("run"), 7, "/data/nq/test.jsonl").name
    'step-000007-data_nq_test.jsonl.jsonl'
    >>> evaluation_file(Path("run"), 4, "data:hotpot53@1").name
    'step-000004-data_hotpot53@1.jsonl'
    """
    safe = re.sub(r"[^A-Za-z0-9_.@-]+", "_", benchmark).strip("._")[-100:] or "benchmark"
    return out_dir / EVALUATIONS_DIR / f"step-{step:06d}-{safe}.jsonl"


def evaluation_file_found(out_dir: Path, step: int, benchmark: str) -> Path:
    """`evaluation_file`, or where a run directory written before `@` was kept in the names has it (`data_x_1` for
    `data:x@1`) when only that exists."""
    path = evaluation_file(out_dir, step, benchmark)
    legacy = path.with_name(path.name.replace("@", "_"))
    return legacy if not path.exists() and legacy.exists() else path


def write_answers(path: Path, answers: Sequence[Mapping[str, Any]]) -> None:
    """One JSON object per question, written whole (a temporary file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers), encoding="utf-8")
    partial.replace(path)


def read_answers(path: Path) -> list[dict[str, Any]]:
    """What `write_answers` wrote."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def protocol_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """How well a step's rollouts follow the protocol, whatever the training reward: exact match, the share that
    ended in an `<answer>` and the share of well-formed trajectories."""
    return {
        "em": statistics.fmean(exact_match(t.answer, t.question.golden_answers) for t in trajectories),
        "answered": statistics.fmean(t.answer is not None for t in trajectories),
        "well_formed": statistics.fmean(is_valid_format(t.response) for t in trajectories),
    }


def reward_split(trajectories: Sequence[Trajectory], env: EnvConfig) -> dict[str, float]:
    """The step's mean training reward in two parts that add up to it (`rewards.REWARD_PARTS`): `reward_format`, what
    the rollouts earned for their form, and `reward_correct`, what they earned for what their answers say. A reward
    that rises on its format part alone has taught the protocol, not the answers."""
    parts = REWARD_PARTS[env.reward](
        [t.response for t in trajectories],
        golden_answers=[t.question.golden_answers for t in trajectories],
        answers=[t.answer for t in trajectories],
        format_score=env.format_score,
        retrieval_score=env.retrieval_score,
        answer_score=env.answer_score,
        format_requires_search=env.format_requires_search,
        f1_score=env.f1_score,
    )
    return {
        "reward_format": statistics.fmean(p.format for p in parts),
        "reward_correct": statistics.fmean(p.correct for p in parts),
    }


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_state(state: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
