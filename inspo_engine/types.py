"""Plain data shared by the engine's parts: questions, rollout requests, trajectories and the record a trajectory is
stored and sent as; no behaviour."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Question:
    """One QA example: the question text and every accepted gold answer."""

    id: str
    text: str
    golden_answers: tuple[str, ...]


@dataclass(frozen=True)
class RolloutRequest:
    """One question paired with the instruction sampled for it; all G rollouts of the group share both."""

    instruction_id: str
    instruction: str
    question: Question


@dataclass
class Trajectory:
    """One rollout. A failed rollout scores 0 and carries its error instead of raising.

    ``payload`` is the backend's private data (token ids, masks, log-probs); it never leaves the backend
    and is dropped whenever the trajectory is stored or serialised.
    """

    instruction_id: str
    question: Question
    response: str
    reward: float
    answer: str | None = None
    tool_calls: int = 0
    response_tokens: int = 0
    error: str | None = None
    payload: Any = field(default=None, repr=False, compare=False)

    def record(self) -> TrajectoryRecord:
        """The trajectory as it is stored and sent (the backend's payload dropped)."""
        return TrajectoryRecord(
            instruction_id=self.instruction_id,
            question_id=self.question.id,
            question=self.question.text,
            golden_answers=list(self.question.golden_answers),
            response=self.response,
            reward=self.reward,
            answer=self.answer,
            tool_calls=self.tool_calls,
            response_tokens=self.response_tokens,
            error=self.error,
        )

    def to_dict(self) -> dict[str, Any]:
        """`record()` as JSON-able data."""
        return asdict(self.record())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """A trajectory from `to_dict`'s data."""
        return TrajectoryRecord(**data).trajectory()


@dataclass(frozen=True)
class TrajectoryRecord:
    """One rollout as it is stored and sent (replay state, `TrajectoriesSampled` events, answers files): a
    Trajectory's fields with its question spelt out, without the backend's payload."""

    instruction_id: str
    question_id: str
    question: str
    golden_answers: list[str]
    response: str
    reward: float
    answer: str | None = None
    tool_calls: int = 0
    response_tokens: int = 0
    error: str | None = None

    def trajectory(self) -> Trajectory:
        """The Trajectory it records (numbers read as the types they are, whatever JSON made of them)."""
        return Trajectory(
            instruction_id=self.instruction_id,
            question=Question(self.question_id, self.question, tuple(self.golden_answers)),
            response=self.response,
            reward=float(self.reward),
            answer=self.answer,
            tool_calls=int(self.tool_calls),
            response_tokens=int(self.response_tokens),
            error=self.error,
        )
