"""Algorithm 1 of INSPO: ties the population, the replay buffer, a policy backend and an optimizer LLM together.

It knows the schedule (sample → rollout → attribute → update → prune → evolve → verify) and the run's state; it
knows nothing about how a backend generates text or how an optimizer is reached.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .backends.base import PolicyBackend
from .checkpoints import checkpoint_path, drop_old_checkpoints, read_state, write_checkpoint
from .config import RunConfig
from .env.rewards import exact_match, is_valid_format
from .events import (
    BudgetExhausted,
    CandidateInfo,
    CheckpointSaved,
    EvalCompleted,
    EventSink,
    EvolutionCompleted,
    InstructionAdded,
    InstructionProposed,
    InstructionPruned,
    InstructionVerified,
    OptimizerFailed,
    Overhead,
    PopulationChanged,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuperseded,
    StageStarted,
    StepCompleted,
    TrajectoriesSampled,
)
from .optimizers.base import OptimizerBudget, OptimizerClient, OptimizerError
from .population import Instruction, Population
from .proposers import (
    OPTIMIZER_SYSTEM_PROMPT,
    FailureExample,
    ScoredInstruction,
    build_prompt,
    parse_proposal,
)
from .replay import ReplayBuffer
from .types import Question, RolloutRequest, Trajectory

STATE_SCHEMA_VERSION = 1
__all__ = ["CoEvolution", "RunResult", "phases_for"]


@dataclass(frozen=True)
class Phase:
    """A stretch of steps: `train` updates the policy; `evolve` runs pruning and evolution on their schedule."""

    name: str
    steps: int
    train: bool
    evolve: bool


def phases_for(config: RunConfig) -> list[Phase]:
    """The phases a mode runs: online co-evolves; static never evolves; pre/post optimise instructions with a
    frozen policy for `evolve_until` steps before or after RL."""
    train_steps, optimise_steps = config.grpo.total_steps, config.evolution.evolve_until
    evolving = config.evolution.enabled or config.population.prune
    if config.mode == "static":
        return [Phase("train", train_steps, train=True, evolve=False)]
    if config.mode == "pre":
        return [Phase("optimise", optimise_steps, False, True), Phase("train", train_steps, True, False)]
    if config.mode == "post":
        return [Phase("train", train_steps, True, False), Phase("optimise", optimise_steps, False, True)]
    return [Phase("train", train_steps, train=True, evolve=evolving)]


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
    budget_reported: bool = False
    overhead: Overhead = field(default_factory=Overhead)


class CoEvolution:
    """One INSPO run. Build it, optionally `load_checkpoint`, then `run()`."""

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
    ) -> None:
        """`should_stop` is asked after every step (True: stop there, with a checkpoint). `owns_run` is asked
        before every checkpoint write: False means another process has taken the run over, and the loop raises
        RunSuperseded instead of writing."""
        config.validate()
        if not train_questions:
            raise ValueError("no training questions")
        if optimizer is None and needs_optimizer(config):
            raise ValueError("this config evolves instructions but no optimizer client was given")
        self.config = config
        self.backend = backend
        self.questions = list(train_questions)
        self.optimizer = optimizer
        self.sink = sink
        self.out_dir = out_dir
        self.eval_sets = dict(eval_sets or {})
        self.should_stop = should_stop
        self.owns_run = owns_run
        pop = config.population
        self.population = Population(
            max_size=pop.population_size,
            n_parents=pop.n_parents,
            temperature=pop.temperature,
            weight_window=pop.weight_window,
        )
        self.replay = ReplayBuffer(config.evolution.replay_capacity)
        self.budget = OptimizerBudget(max_calls=config.optimizer.max_calls, max_tokens=config.optimizer.max_tokens)
        self.sample_rng = random.Random(config.seed)
        self.replay_rng = random.Random(config.seed + 1)
        self.progress = _Progress()
        self.phases = phases_for(config)
        self._round = 0

    # -- the run -------------------------------------------------------------------------------------------

    @property
    def total_steps(self) -> int:
        return sum(phase.steps for phase in self.phases)

    def run(self) -> RunResult:
        resumed = self.progress.step
        self.sink.emit(
            RunStarted(
                config=self.config.to_dict(),
                resumed_from_step=resumed,
                backend=self.backend.name,
                optimizer_model=self.optimizer.model if self.optimizer else None,
            )
        )
        try:
            if not resumed and not self.population.members:
                self._initialise_population()
            status = self._run_phases()
            return self._finish(status)
        except RunSuperseded:
            raise
        except Exception as error:
            self.sink.emit(RunFailed(step=self.progress.step, error=f"{type(error).__name__}: {error}"))
            raise

    def _run_phases(self) -> str:
        while self.progress.phase_index < len(self.phases):
            phase = self.phases[self.progress.phase_index]
            while self.progress.phase_step < phase.steps:
                self._step(phase)
                if self.should_stop():
                    return "cancelled"
            self._enter_next_phase(phase)
        return "finished"

    def _finish(self, status: str) -> RunResult:
        step = self.progress.step
        if status == "finished" and self.eval_sets:
            self._evaluate(step)
        checkpoint = self.save_checkpoint() if self.out_dir else None
        best = self.population.best()
        self.sink.emit(
            RunFinished(
                step=step,
                status=status,
                best_instruction_id=best.id,
                best_instruction=best.text,
                overhead=self.progress.overhead,
            )
        )
        return RunResult(status=status, step=step, best_instruction=best, checkpoint=checkpoint)

    def _enter_next_phase(self, finished: Phase) -> None:
        """Between phases: after `pre` optimisation only I* trains; before `post` optimisation the population
        is initialised against the trained policy."""
        self.progress.phase_index += 1
        self.progress.phase_step = 0
        if self.progress.phase_index >= len(self.phases):
            return
        following = self.phases[self.progress.phase_index]
        step = self.progress.step
        if finished.evolve and not following.evolve:
            best = self.population.best()
            for member in self.population.members:
                if member.id != best.id:
                    self._retire(member, step, "frozen: only the best instruction trains")
            self._emit_population(step, "frozen")
        elif following.evolve and not finished.evolve:
            for text in self.config.population.initial_instructions:
                self._add(text, origin="manual", step=step, parent_id=None)
            self._fill_with_paraphrases(step)

    # -- one step ------------------------------------------------------------------------------------------

    def _step(self, phase: Phase) -> None:
        self.progress.step += 1
        self.progress.phase_step += 1
        step, cfg = self.progress.step, self.config
        self._stage(step, "rollout")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        questions = self._next_questions(cfg.grpo.batch_size)
        chosen = self.population.sample(self.sample_rng, len(questions))
        requests = [RolloutRequest(ins.id, ins.text, q) for ins, q in zip(chosen, questions, strict=True)]
        groups = self.backend.rollout(requests, cfg.grpo.group_size)
        timings["rollout"] = time.perf_counter() - started
        self._attribute(step, groups)
        metrics: dict[str, float] = {}
        if phase.train:
            self._stage(step, "update")
            result = self.backend.update(groups)
            metrics, timings = dict(result.metrics), {**timings, **result.timings}
        self._count_rollouts(phase, len(requests) * cfg.grpo.group_size)
        flat = [t for group in groups for t in group]
        self.replay.add(step, flat)
        self._emit_step(step, phase, flat, chosen, metrics, timings)
        self._emit_population(step, "step")
        self._at_step_boundary(step, phase)

    def _attribute(self, step: int, groups: Sequence[Sequence[Trajectory]]) -> None:
        """Each instruction gets the mean reward of the groups it was used for in this step."""
        by_instruction: dict[str, list[float]] = defaultdict(list)
        for group in groups:
            by_instruction[group[0].instruction_id].append(statistics.fmean(t.reward for t in group))
        self.population.record_step(step, by_instruction)

    def _count_rollouts(self, phase: Phase, n: int) -> None:
        overhead = self.progress.overhead
        if phase.train:
            self.progress.overhead = replace(overhead, training_rollouts=overhead.training_rollouts + n)
        else:
            self.progress.overhead = replace(overhead, verification_rollouts=overhead.verification_rollouts + n)

    def _at_step_boundary(self, step: int, phase: Phase) -> None:
        cfg, local = self.config, self.progress.phase_step
        if phase.evolve and cfg.population.prune and local % cfg.population.prune_every == 0:
            self._prune(step)
        if phase.evolve and local in cfg.evolution_steps(phase.steps):
            self._evolve(step)
        if phase.train and cfg.eval.eval_every and local % cfg.eval.eval_every == 0 and local < phase.steps:
            self._evaluate(step)
        every = cfg.checkpoint.checkpoint_every
        if self.out_dir and every and step % every == 0 and step < self.total_steps:
            self.save_checkpoint()

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

    # -- population changes --------------------------------------------------------------------------------

    def _retire(self, instruction: Instruction, step: int, reason: str) -> None:
        weight = instruction.weight(self.population.weight_window)
        self.population.retire(instruction.id, step=step, reason=reason)
        self.sink.emit(InstructionPruned(step=step, instruction_id=instruction.id, weight=weight, reason=reason))

    def _prune(self, step: int) -> None:
        weights = self.population.weights()
        dropped = self.population.prune(step)
        for instruction in dropped:
            self.sink.emit(
                InstructionPruned(
                    step=step, instruction_id=instruction.id, weight=weights[instruction.id], reason="pruned"
                )
            )
        if dropped:
            self._emit_population(step, "pruned")

    def _add(
        self,
        text: str,
        *,
        origin: Any,
        step: int,
        parent_id: str | None,
        score: float | None = None,
        round_id: str | None = None,
    ) -> Instruction:
        instruction = self.population.add(text, origin=origin, step=step, parent_id=parent_id, verify_score=score)
        self.sink.emit(
            InstructionAdded(step=step, instruction=instruction.info(), verify_score=score, round_id=round_id)
        )
        return instruction

    def _initialise_population(self) -> None:
        """Seed, then the user's instructions, then optimizer paraphrases of the seed up to the population size."""
        pop = self.config.population
        self._stage(0, "initialise")
        self._add(pop.seed_instruction, origin="seed", step=0, parent_id=None)
        if self.config.mode in ("online", "pre"):
            for text in pop.initial_instructions:
                self._add(text, origin="manual", step=0, parent_id=None)
            self._fill_with_paraphrases(0)
        self._emit_population(0, "initialised")

    def _fill_with_paraphrases(self, step: int) -> None:
        slots = self.population.max_size - len(self.population)
        if not self.config.population.paraphrase_init or slots <= 0 or self.optimizer is None:
            return
        seed = self.population.members[0]
        round_id = f"init-{step:05d}"
        texts = self._propose_round(step, seed, "paraphrase", slots, round_id=round_id)
        for text in texts[:slots]:
            self._add(text, origin="paraphrase", step=step, parent_id=seed.id, round_id=round_id)
        if texts:
            self._emit_population(step, "initialised")

    # -- evolution: select → generate → verify ---------------------------------------------------------------

    def _evolve(self, step: int) -> None:
        """Select the parents, then generate → verify rounds until every parent's share of the free slots is
        filled or `max_verify_rounds` rounds ran. Each round asks the optimizer once per parent whose share is not
        full yet, so with several parents every one of them gets proposals."""
        parents = self.population.top(self.population.n_parents)
        shares = slot_shares(self.population.max_size - len(parents), len(parents))
        evo = self.config.evolution
        questions = self.replay.verification_set(self.replay_rng, evo.verify_samples) if evo.verify else []
        parent_scores: dict[str, float] = {}
        accepted: list[tuple[Instruction, str, float | None, str]] = []
        rounds = 0
        rollouts_before = self.progress.overhead.verification_rollouts
        while rounds < evo.max_verify_rounds and self._budget_left(step):
            wanting = [
                (p, share - sum(a[0].id == p.id for a in accepted)) for p, share in zip(parents, shares, strict=True)
            ]
            wanting = [(p, left) for p, left in wanting if left > 0]
            if not wanting:
                break
            rounds += 1
            for parent, left in wanting:
                if not self._budget_left(step):
                    break
                round_id, texts = self._generate(step, parent, rounds)
                taken = {text for _, text, _, _ in accepted}
                fresh = [t for t in texts if t not in taken and not self.population.contains_text(t)]
                for text, score in self._verify(step, round_id, parent, fresh, questions, parent_scores, left):
                    accepted.append((parent, text, score, round_id))
        added = self._replace_population(step, parents, accepted)
        self.sink.emit(
            EvolutionCompleted(
                step=step,
                parent_ids=[p.id for p in parents],
                added_ids=[ins.id for ins in added],
                rounds=rounds,
                verification_rollouts=self.progress.overhead.verification_rollouts - rollouts_before,
            )
        )
        self._emit_population(step, "evolved")

    def _replace_population(
        self, step: int, parents: list[Instruction], accepted: list[tuple[Instruction, str, float | None, str]]
    ) -> list[Instruction]:
        """Parents ∪ verified candidates; nothing changes when no candidate was accepted."""
        if not accepted:
            return []
        parent_ids = {p.id for p in parents}
        for member in self.population.members:
            if member.id not in parent_ids:
                self._retire(member, step, "replaced at evolution")
        origin = self.config.evolution.proposer
        added = [
            self._add(text, origin=origin, step=step, parent_id=parent.id, score=score, round_id=round_id)
            for parent, text, score, round_id in accepted
        ]
        reset_ids = None if self.config.evolution.reset_weights == "all" else [ins.id for ins in added]
        self.population.reset_weights(step, reset_ids)
        return added

    def _generate(self, step: int, parent: Instruction, round_no: int) -> tuple[str, list[str]]:
        self._round += 1
        round_id = f"r{step:05d}-{self._round:03d}"
        texts = self._propose_round(
            step,
            parent,
            self.config.evolution.proposer,
            self.config.evolution.n_candidates,
            round_id=round_id,
            round_no=round_no,
        )
        return round_id, texts

    def _propose_round(
        self, step: int, parent: Instruction, kind: str, n: int, *, round_id: str, round_no: int = 0
    ) -> list[str]:
        """One optimizer call; emits what it was shown, its critique and candidates. Failures emit and return []."""
        assert self.optimizer is not None
        if not self._budget_left(step):
            return []
        self._stage(step, "propose")
        failures = self._failures_for(parent) if kind == "reflection" else []
        history = self._history() if kind == "history" else []
        prompt = build_prompt(
            kind,  # type: ignore[arg-type]
            parent=parent.text,
            n=n,
            failures=failures,
            history=history,
            placement=self.config.env.instruction_placement,
        )
        try:
            completion = self.optimizer.complete(prompt, system=OPTIMIZER_SYSTEM_PROMPT)
        except OptimizerError as error:
            self.budget.charge_failure()
            self._add_optimizer_cost(1, 0)
            self.sink.emit(OptimizerFailed(step=step, error=str(error)))
            return []
        self.budget.charge(completion)
        self._add_optimizer_cost(1, completion.total_tokens)
        proposal = parse_proposal(completion.text, parent=parent.text, n=n)
        candidates = [CandidateInfo(text=t, valid=True) for t in proposal.candidates]
        candidates += [CandidateInfo(text=r.text, valid=False, reason=r.reason) for r in proposal.rejected]
        self.sink.emit(
            InstructionProposed(
                step=step,
                round_id=round_id,
                round=round_no,
                proposer=kind,
                parent_id=parent.id,
                critique=proposal.critique,
                failures=[f.__dict__ | {"golden_answers": list(f.golden_answers)} for f in failures],
                candidates=candidates,
                optimizer_model=completion.model,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
            )
        )
        return list(proposal.candidates)

    def _verify(
        self,
        step: int,
        round_id: str,
        parent: Instruction,
        texts: list[str],
        questions: list[Question],
        parent_scores: dict[str, float],
        slots: int,
    ) -> list[tuple[str, float | None]]:
        """Score candidates on D_B with the current policy and keep the top ones that fit and clear the bar: with
        `verify_min_ratio` r > 0 the parent is scored on the same questions and a candidate scoring below
        r × the parent's score is rejected (r = 1: no candidate worse than its parent joins)."""
        if not texts:
            return []
        if not self.config.evolution.verify or not questions:
            return [(text, None) for text in texts[:slots]]
        self._stage(step, "verify")
        scores = {text: self._score(text, questions) for text in texts}
        ratio = self.config.evolution.verify_min_ratio
        bar = 0.0
        if ratio > 0:
            if parent.id not in parent_scores:
                parent_scores[parent.id] = self._score(parent.text, questions)
            bar = ratio * parent_scores[parent.id]
        ranked = sorted(texts, key=lambda t: -scores[t])
        kept = [t for t in ranked if scores[t] >= bar][:slots]
        verdicts = [
            CandidateInfo(
                text=t, valid=True, score=scores[t], accepted=t in kept, reason=self._verdict(t, kept, scores, bar)
            )
            for t in ranked
        ]
        self.sink.emit(
            InstructionVerified(
                step=step,
                round_id=round_id,
                parent_id=parent.id,
                parent_score=parent_scores.get(parent.id),
                n_questions=len(questions),
                candidates=verdicts,
            )
        )
        return [(t, scores[t]) for t in kept]

    @staticmethod
    def _verdict(text: str, kept: list[str], scores: dict[str, float], bar: float) -> str | None:
        if text in kept:
            return None
        if scores[text] < bar:
            return f"scored {scores[text]:.3f}, below the bar {bar:.3f} set by its parent"
        return "outranked: the population is full"

    def _score(self, text: str, questions: list[Question]) -> float:
        rewards = self.backend.score(text, questions)
        overhead = self.progress.overhead
        self.progress.overhead = replace(
            overhead, verification_rollouts=overhead.verification_rollouts + len(questions)
        )
        return statistics.fmean(rewards) if rewards else 0.0

    def _failures_for(self, parent: Instruction) -> list[FailureExample]:
        picked = self.replay.failures(self.replay_rng, self.config.evolution.n_failures, instruction_id=parent.id)
        return [FailureExample(t.question.text, t.response, t.question.golden_answers, t.reward) for t in picked]

    def _history(self) -> list[ScoredInstruction]:
        scored = [(ins.text, ins.lifetime_reward()) for ins in self.population.archive.values()]
        return [ScoredInstruction(text, 100.0 * reward) for text, reward in scored if reward is not None]

    def _budget_left(self, step: int) -> bool:
        if not self.budget.exhausted():
            return True
        if not self.progress.budget_reported:
            self.progress.budget_reported = True
            self.sink.emit(BudgetExhausted(step=step, calls=self.budget.calls, tokens=self.budget.tokens))
        return False

    def _add_optimizer_cost(self, calls: int, tokens: int) -> None:
        overhead = self.progress.overhead
        self.progress.overhead = replace(
            overhead,
            optimizer_calls=overhead.optimizer_calls + calls,
            optimizer_tokens=overhead.optimizer_tokens + tokens,
        )

    # -- evaluation and events -----------------------------------------------------------------------------

    def _evaluate(self, step: int) -> None:
        best = self.population.best()
        for name, questions in self.eval_sets.items():
            self._stage(step, "evaluate")
            rewards = self.backend.evaluate(best.text, questions)
            value = statistics.fmean(rewards) if rewards else 0.0
            self.sink.emit(
                EvalCompleted(
                    step=step, benchmark=name, metric="em", value=value, n=len(rewards), instruction_id=best.id
                )
            )

    def _stage(self, step: int, stage: str) -> None:
        self.sink.emit(StageStarted(step=step, stage=stage))

    def _emit_step(
        self,
        step: int,
        phase: Phase,
        flat: list[Trajectory],
        chosen: list[Instruction],
        metrics: dict[str, float],
        timings: dict[str, float],
    ) -> None:
        rewards = [t.reward for t in flat]
        metrics = {**protocol_metrics(flat), **metrics}
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
                metrics=metrics,
                timings=timings,
                overhead=self.progress.overhead,
            )
        )
        n_log = self.config.log_trajectories
        if n_log:
            stride = max(1, len(flat) // n_log)
            picked = [t.to_dict() for t in flat[::stride][:n_log]]
            self.sink.emit(TrajectoriesSampled(step=step, trajectories=picked))

    def _emit_population(self, step: int, reason: str) -> None:
        self.sink.emit(
            PopulationChanged(
                step=step, reason=reason, members=self.population.snapshot(), best_id=self.population.best().id
            )
        )

    # -- checkpoints ---------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The loop's whole state: enough, with the backend's own, to continue exactly."""
        progress = self.progress
        return {
            "schema_version": STATE_SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "progress": {
                "step": progress.step,
                "phase_index": progress.phase_index,
                "phase_step": progress.phase_step,
                "epoch": progress.epoch,
                "position": progress.position,
                "budget_reported": progress.budget_reported,
                "overhead": progress.overhead.__dict__,
                "round": self._round,
            },
            "population": self.population.to_state(),
            "replay": self.replay.to_state(),
            "budget": self.budget.to_state(),
            "rngs": {"sample": _rng_state(self.sample_rng), "replay": _rng_state(self.replay_rng)},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        version = state.get("schema_version")
        if version != STATE_SCHEMA_VERSION:
            raise ValueError(
                f"checkpoint state has schema_version {version!r}; this engine reads {STATE_SCHEMA_VERSION}"
            )
        data = dict(state["progress"])
        self._round = int(data.pop("round"))
        data["overhead"] = Overhead(**data["overhead"])
        self.progress = _Progress(**data)
        self.population.load_state(state["population"])
        self.replay.load_state(state["replay"])
        self.budget = OptimizerBudget.from_state(state["budget"])
        self.sample_rng.setstate(_rng_from_state(state["rngs"]["sample"]))
        self.replay_rng.setstate(_rng_from_state(state["rngs"]["replay"]))

    def save_checkpoint(self) -> Path:
        """The backend's policy and this loop's state as the checkpoint of the current step (see `checkpoints`);
        older ones beyond keep_last are deleted."""
        assert self.out_dir is not None, "no out_dir to save checkpoints in"
        step = self.progress.step
        if not self.owns_run():
            raise RunSuperseded(f"another process owns this run now; the checkpoint of step {step} is not written")
        self._stage(step, "checkpoint")
        directory = checkpoint_path(self.out_dir, step)
        size = write_checkpoint(directory, self.state(), self.backend.save)
        self.sink.emit(CheckpointSaved(step=step, path=str(directory), bytes=size))
        drop_old_checkpoints(self.out_dir, self.config.checkpoint.keep_last)
        return directory

    def load_checkpoint(self, directory: Path) -> None:
        self.load_state(read_state(directory))
        self.backend.load(directory)


def protocol_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """How well a step's rollouts follow the protocol, whatever the training reward: exact match, the share that
    ended in an `<answer>` and the share of well-formed trajectories."""
    return {
        "em": statistics.fmean(exact_match(t.answer, t.question.golden_answers) for t in trajectories),
        "answered": statistics.fmean(t.answer is not None for t in trajectories),
        "well_formed": statistics.fmean(is_valid_format(t.response) for t in trajectories),
    }


def slot_shares(slots: int, parents: int) -> list[int]:
    """The free slots split as evenly as possible between the parents, the best parent first.

    >>> slot_shares(6, 1)
    [6]
    >>> slot_shares(5, 2)
    [3, 2]
    >>> slot_shares(1, 3)
    [1, 0, 0]
    """
    return [slots // parents + (1 if i < slots % parents else 0) for i in range(parents)]


def needs_optimizer(config: RunConfig) -> bool:
    if config.mode == "static":
        return False
    return config.evolution.enabled or (config.population.paraphrase_init and config.population.population_size > 1)


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_state(state: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
