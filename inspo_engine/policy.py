"""The PolicyBackend protocol: what the co-evolution loop needs from whatever trains the policy, and the results it
reports (UpdateResult, QuestionResult); no implementation — the torch and verl backends implement it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .env.rewards import exact_match, f1
from .types import Question, RolloutRequest, Trajectory


@dataclass(frozen=True)
class QuestionResult:
    """One evaluated question: its id, the exact match and token F1 of the greedy answer against the gold answers, and
    the answer itself (None: the reply gave none). Two evaluations on the same questions pair on `question_id`."""

    question_id: str
    em: float
    f1: float
    answer: str | None

    @classmethod
    def of(cls, question: Question, answer: str | None) -> QuestionResult:
        """Score `answer` to `question`.

        >>> QuestionResult.of(Question("q1", "Capital of Peru?", ("Lima",)), "lima")
        QuestionResult(question_id='q1', em=1.0, f1=1.0, answer='lima')
        """
        gold = question.golden_answers
        return cls(question.id, float(exact_match(answer, gold)), float(f1(answer, gold)), answer)

    @classmethod
    def of_trajectory(cls, trajectory: Trajectory) -> QuestionResult:
        return cls.of(trajectory.question, trajectory.answer)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UpdateResult:
    """What one policy update reports: scalar metrics (KL, entropy, clip fraction, lr, …) and timings in seconds."""

    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


class PolicyBackend(Protocol):
    """Rolls out, updates and scores a policy. A failed rollout scores 0 and carries its error; only whole-system
    failures raise."""

    name: str
    computes_in: str
    """The precision its products run in ('fp32' or 'bf16-mixed'): `backend.precision` as resolved on this machine."""

    def rollout(self, requests: Sequence[RolloutRequest], group_size: int) -> list[list[Trajectory]]:
        """G trajectories per request, one group per request, in request order, with rewards filled in."""
        ...

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> UpdateResult:
        """One GRPO update on the groups `rollout` returned (advantages are normalised within each group)."""
        ...

    def score(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        """Training reward of one greedy rollout (G = 1) per question with the current policy: verification."""
        ...

    def evaluate(self, instruction: str, questions: Sequence[Question]) -> list[QuestionResult]:
        """One greedy rollout per question with the current policy, scored by exact match and F1 whatever the
        training reward, in question order: evaluation."""
        ...

    def save(self, directory: Path) -> None:
        """Write the policy into the checkpoint `directory`: `policy/` (a Hugging Face directory where the
        backend has one), with the backend's own rng and optimizer state beside it."""
        ...

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote into the checkpoint `directory`."""
        ...
