"""The PolicyBackend protocol: what the co-evolution loop needs from whatever trains the policy; no implementation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..checkpoints import POLICY_DIR as POLICY_DIR
from ..types import Question, RolloutRequest, Trajectory


@dataclass(frozen=True)
class UpdateResult:
    """What one policy update reports: scalar metrics (KL, entropy, clip fraction, lr, …) and timings in seconds."""

    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


class PolicyBackend(Protocol):
    """Rolls out, updates and scores a policy. A failed rollout scores 0 and carries its error; only whole-system
    failures raise."""

    name: str

    def rollout(self, requests: Sequence[RolloutRequest], group_size: int) -> list[list[Trajectory]]:
        """G trajectories per request, one group per request, in request order, with rewards filled in."""
        ...

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> UpdateResult:
        """One GRPO update on the groups `rollout` returned (advantages are normalised within each group)."""
        ...

    def score(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        """Training reward of one greedy rollout (G = 1) per question with the current policy: verification."""
        ...

    def evaluate(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        """Exact match of one greedy rollout per question with the current policy, whatever the training reward:
        evaluation."""
        ...

    def save(self, directory: Path) -> None:
        """Write the policy into the checkpoint `directory`: `policy/` (a Hugging Face directory where the
        backend has one), with the backend's own rng and optimizer state beside it."""
        ...

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote into the checkpoint `directory`."""
        ...
