"""Plain data shared by the engine's parts: questions, rollout requests and trajectories; no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "instruction_id": self.instruction_id,
            "question_id": self.question.id,
            "question": self.question.text,
            "golden_answers": list(self.question.golden_answers),
            "response": self.response,
            "reward": self.reward,
            "answer": self.answer,
            "tool_calls": self.tool_calls,
            "response_tokens": self.response_tokens,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        question = Question(data["question_id"], data["question"], tuple(data["golden_answers"]))
        return cls(
            instruction_id=data["instruction_id"],
            question=question,
            response=data["response"],
            reward=float(data["reward"]),
            answer=data.get("answer"),
            tool_calls=int(data.get("tool_calls", 0)),
            response_tokens=int(data.get("response_tokens", 0)),
            error=data.get("error"),
        )
