"""The replay buffer keeps recent trajectories for reflection and verification; it knows nothing about models."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from .types import Question, Trajectory


class ReplayBuffer:
    """(instruction, question, trajectory, reward, step) records, oldest dropped first past `capacity`."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be ≥ 1")
        self.capacity = capacity
        self._items: deque[tuple[int, Trajectory]] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def latest_step(self) -> int | None:
        return self._items[-1][0] if self._items else None

    def add(self, step: int, trajectories: Iterable[Trajectory]) -> None:
        for trajectory in trajectories:
            trajectory.payload = None
            self._items.append((step, trajectory))

    def failures(self, rng: random.Random, n: int, *, instruction_id: str | None = None) -> list[Trajectory]:
        """Up to n trajectories for reflection: failures (reward < 1) before successes, then the latest step
        first, the given instruction's own before others', the lowest reward first, ties drawn at random.
        """
        keyed = [
            (
                t.reward >= 1.0,
                -step,
                instruction_id is not None and t.instruction_id != instruction_id,
                t.reward,
                rng.random(),
                i,
            )
            for i, (step, t) in enumerate(self._items)
        ]
        keyed.sort()
        chosen = [self._items[key[-1]][1] for key in keyed[:n]]
        return chosen

    def verification_set(self, rng: random.Random, n: int) -> list[Question]:
        """D_B: up to n distinct questions drawn uniformly from the buffer."""
        questions: dict[str, Question] = {}
        for _, trajectory in self._items:
            questions.setdefault(trajectory.question.id, trajectory.question)
        pool = sorted(questions.values(), key=lambda q: q.id)
        return rng.sample(pool, min(n, len(pool)))

    def to_state(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "items": [{"step": step, "trajectory": t.to_dict()} for step, t in self._items],
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._items = deque(
            ((int(item["step"]), Trajectory.from_dict(item["trajectory"])) for item in state["items"]),
            maxlen=self.capacity,
        )
