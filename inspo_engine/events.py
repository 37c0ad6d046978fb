"""The typed events the engine emits (its only contract with callers) and sinks for them; no I/O but JSONL."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TextIO

from .types import TrajectoryRecord as TrajectoryRecord  # re-exported: events carry it


@dataclass(frozen=True)
class Event:
    """Base of every event: `kind` names it on the wire, `time` is the wall clock when it was made."""

    kind: ClassVar[str] = "event"
    time: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Overhead:
    """What INSPO costs on top of GRPO: optimizer calls and tokens, verification vs training rollouts."""

    optimizer_calls: int = 0
    optimizer_tokens: int = 0
    training_rollouts: int = 0
    verification_rollouts: int = 0

    @property
    def verification_ratio(self) -> float:
        """Verification rollouts as a fraction of training rollouts (the paper reports 1.4–7 %)."""
        return self.verification_rollouts / self.training_rollouts if self.training_rollouts else 0.0


@dataclass(frozen=True)
class MemberStats:
    """One instruction in a population snapshot."""

    id: str
    weight: float
    probability: float
    samples: int
    """Questions (groups of rollouts) it was sampled for in the last recorded step."""
    mean_reward: float | None
    """Their mean reward."""
    recent_reward: float | None = None
    """The mean of its per-step mean rewards over the steps its weight counts (the weight, when weighted); None in
    events written before it was recorded, and before its first use."""
    recent_low: float | None = None
    """The 95 % interval of `recent_reward` (`Instruction.recent_interval`); None with fewer than two groups."""
    recent_high: float | None = None
    recent_samples: int = 0
    """The groups behind `recent_reward` (0 in events written before it was recorded)."""


@dataclass(frozen=True)
class Diversity:
    """How alike a population's living instructions are (see `diversity`, which measures it): pairwise embedding
    cosine, word-set Jaccard overlap, distinct strategies and the entropy of the sampling distribution. Pairwise
    measures are None for a population of one."""

    size: int
    cosine_mean: float | None
    cosine_min: float | None
    cosine_max: float | None
    jaccard_mean: float | None
    strategies: int
    entropy: float
    entropy_normalised: float | None


@dataclass(frozen=True)
class InstructionInfo:
    """An instruction as it was born: the lineage view draws these."""

    id: str
    text: str
    origin: str
    parent_id: str | None
    birth_step: int
    author: str | None = None
    """Who wrote it, for an instruction a person injected into the running run (origin `human`)."""


@dataclass(frozen=True)
class CandidateInfo:
    """One candidate an optimizer call produced; `instruction_id` is set once it joins the population."""

    text: str
    valid: bool
    reason: str | None = None
    score: float | None = None
    accepted: bool = False
    instruction_id: str | None = None


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    config: dict[str, Any]
    resumed_from_step: int = 0
    backend: str = ""
    optimizer_model: str | None = None
    machine: dict[str, str] = field(default_factory=dict)
    """What the run computes on (`machine.describe`); empty in events written before it was recorded."""
    precision: str = ""
    """What its products run in ('fp32' or 'bf16-mixed': `backend.precision` resolved on this machine); empty in
    events written before it was recorded."""


@dataclass(frozen=True)
class InstructionAdded(Event):
    kind: ClassVar[str] = "instruction_added"
    step: int
    instruction: InstructionInfo
    verify_score: float | None = None
    round_id: str | None = None


@dataclass(frozen=True)
class StepCompleted(Event):
    """One training (or optimisation-only) step with the metrics Fig. 2 of the paper plots, and more."""

    kind: ClassVar[str] = "step_completed"
    step: int
    total_steps: int
    phase: str
    reward_mean: float
    reward_std: float
    tool_calls_mean: float
    response_length_mean: float
    instruction_length_mean: float
    metrics: dict[str, float]
    timings: dict[str, float]
    overhead: Overhead


@dataclass(frozen=True)
class TrajectoriesSampled(Event):
    """A few rollouts of a step, for the trajectory viewer."""

    kind: ClassVar[str] = "trajectories_sampled"
    step: int
    trajectories: list[TrajectoryRecord]


@dataclass(frozen=True)
class PopulationRecord(Event):
    """Base of the events of one population record: the step and why it was recorded (init, step, pruned, …)."""

    step: int
    reason: str


@dataclass(frozen=True)
class PopulationChanged(PopulationRecord):
    """The population after a step or a change: weight, sampling probability, samples and reward per member."""

    kind: ClassVar[str] = "population_changed"
    members: list[MemberStats]
    best_id: str


@dataclass(frozen=True)
class PopulationDiversity(Diversity, PopulationRecord):
    """A population record's `Diversity` (same step and reason as its PopulationChanged); on the wire its measures
    follow `step` and `reason` as fields of their own."""

    kind: ClassVar[str] = "population_diversity"


@dataclass(frozen=True)
class PopulationCollapsed(Event):
    """The population has looked collapsed (`reasons`: 'cosine', every pair at least `collapse_cosine` alike;
    'entropy', normalised sampling entropy at most `collapse_entropy`) at every record of `steps` consecutive steps
    since `since_step`."""

    kind: ClassVar[str] = "population_collapsed"
    step: int
    since_step: int
    steps: int
    reasons: list[str]
    cosine_min: float | None
    entropy_normalised: float | None
    collapse_cosine: float
    collapse_entropy: float


@dataclass(frozen=True)
class PopulationRecovered(Event):
    """A collapsed population (since `since_step`) no longer looks collapsed."""

    kind: ClassVar[str] = "population_recovered"
    step: int
    since_step: int
    cosine_min: float | None
    entropy_normalised: float | None


@dataclass(frozen=True)
class InstructionProposed(Event):
    """One optimizer call: the parent, what it was shown, its critique and candidates."""

    kind: ClassVar[str] = "instruction_proposed"
    step: int
    round_id: str
    round: int
    proposer: str
    parent_id: str | None
    critique: str
    failures: list[dict[str, Any]]
    candidates: list[CandidateInfo]
    optimizer_model: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class InstructionVerified(Event):
    """A verification round's verdicts: each candidate's score on D_B and whether it joined."""

    kind: ClassVar[str] = "instruction_verified"
    step: int
    round_id: str
    parent_id: str | None
    parent_score: float | None
    n_questions: int
    candidates: list[CandidateInfo]


@dataclass(frozen=True)
class InstructionPruned(Event):
    kind: ClassVar[str] = "instruction_pruned"
    step: int
    instruction_id: str
    weight: float
    reason: str


@dataclass(frozen=True)
class ControlHandled(Event):
    """A person's control request (inject, pin, unpin, retire) met a step boundary: applied, or rejected and why.
    `step` is the step it was handled before; `instruction_id` is the instruction it added or named."""

    kind: ClassVar[str] = "control_handled"
    step: int
    request_id: str
    action: str
    status: str
    message: str
    author: str = ""
    instruction_id: str | None = None
    verify_score: float | None = None


@dataclass(frozen=True)
class EvolutionCompleted(Event):
    kind: ClassVar[str] = "evolution_completed"
    step: int
    parent_ids: list[str]
    added_ids: list[str]
    rounds: int
    verification_rollouts: int


@dataclass(frozen=True)
class OptimizerFailed(Event):
    """An optimizer call failed for good; evolution goes on with what it has, training continues."""

    kind: ClassVar[str] = "optimizer_failed"
    step: int
    error: str


@dataclass(frozen=True)
class TrackerFailed(Event):
    """An experiment tracker (`tracking.backends`) could not take what the run sent; the run goes on, and the
    tracker is tried again at the next step with everything it missed."""

    kind: ClassVar[str] = "tracker_failed"
    step: int
    tracker: str
    error: str


@dataclass(frozen=True)
class BudgetExhausted(Event):
    kind: ClassVar[str] = "budget_exhausted"
    step: int
    calls: int
    tokens: int


@dataclass(frozen=True)
class EvalCompleted(Event):
    kind: ClassVar[str] = "eval_completed"
    step: int
    benchmark: str
    metric: str
    value: float
    n: int
    instruction_id: str
    checkpoint: str | None = None
    f1: float | None = None
    """The mean token F1 of the same answers, when the evaluation kept them (metric 'em')."""
    answers: list[dict[str, Any]] = field(default_factory=list)
    """Per question, in order: {"question_id", "em", "f1", "answer"}; empty in events written before they were
    kept, and for a verl validation whose rollouts carried no per-question summary."""


@dataclass(frozen=True)
class CheckpointSaved(Event):
    kind: ClassVar[str] = "checkpoint_saved"
    step: int
    path: str
    bytes: int
    optimizer_bytes: int = 0
    """Of `bytes`, the optimizer state that only resuming needs (0: this checkpoint keeps none)."""
    disk_bytes: int = 0
    """Every checkpoint of the run on disk once retention ran after this one."""


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    step: int
    status: str
    best_instruction_id: str
    best_instruction: str
    overhead: Overhead
    peak_rss_kib: int = 0
    """The resident-set peak of the process that ran the loop (`machine.peak_rss_kib`); 0 where not recorded."""


@dataclass(frozen=True)
class StageStarted(Event):
    """The loop starts a stage of a step (rollout, update, propose, verify, evaluate, checkpoint) or of the
    run (initialise). Progress for a watchdog, and where a step that hangs was when it hung."""

    kind: ClassVar[str] = "stage_started"
    step: int
    stage: str


@dataclass(frozen=True)
class EvalProgress(Event):
    """How far the evaluation of `step` has got: `done` of its `total` questions (over every benchmark), sent as it
    starts (done 0) and after each chunk of answers; step 0 is the untrained policy. Progress only, like
    StageStarted."""

    kind: ClassVar[str] = "eval_progress"
    step: int
    done: int
    total: int
    benchmark: str = ""
    """The benchmark being answered (as the run's eval_sets name it)."""


@dataclass(frozen=True)
class RunFailed(Event):
    kind: ClassVar[str] = "run_failed"
    step: int
    error: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        InstructionAdded,
        StepCompleted,
        TrajectoriesSampled,
        PopulationChanged,
        PopulationDiversity,
        PopulationCollapsed,
        PopulationRecovered,
        InstructionProposed,
        InstructionVerified,
        InstructionPruned,
        ControlHandled,
        EvolutionCompleted,
        OptimizerFailed,
        TrackerFailed,
        BudgetExhausted,
        EvalCompleted,
        CheckpointSaved,
        RunFinished,
        RunFailed,
        StageStarted,
        EvalProgress,
    )
}

_NESTED: dict[str, Callable[[Any], Any]] = {
    "overhead": lambda d: Overhead(**d),
    "members": lambda items: [MemberStats(**d) for d in items],
    "instruction": lambda d: InstructionInfo(**d),
    "candidates": lambda items: [CandidateInfo(**d) for d in items],
    "trajectories": lambda items: [TrajectoryRecord(**d) for d in items],
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from `to_dict` output (e.g. one line of events.jsonl)."""
    payload = dict(data)
    cls = EVENT_TYPES[payload.pop("kind")]
    for key, build in _NESTED.items():
        if key in payload:
            payload[key] = build(payload[key])
    return cls(**payload)


class RunSuperseded(RuntimeError):
    """This process no longer owns the run: another attempt took it over. Whoever learns it first (a sink, the
    loop's ownership check, the caller's stop check) raises it; the run then stops and writes nothing more."""


class EventSink(Protocol):
    """Whatever receives events: a file, the web app's database writer, a test's list. A sink may raise
    RunSuperseded to end the run without another write."""

    def emit(self, event: Event) -> None: ...


class ListSink:
    """Keeps events in memory."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, cls: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


class JsonlSink:
    """Appends one JSON object per line and flushes, so a crash loses at most the event being written."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = path.open("a", encoding="utf-8")

    def emit(self, event: Event) -> None:
        self._file.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class FanoutSink:
    """Sends each event to several sinks in order."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)


def read_events(path: Path) -> list[Event]:
    """Every event of an events.jsonl file, skipping a torn last line."""
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(event_from_dict(json.loads(line)))
        except json.JSONDecodeError:
            continue
    return events
