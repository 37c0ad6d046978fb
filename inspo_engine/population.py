"""The instruction population knows weights, sampling, pruning and lineage; it knows nothing about models or prompts."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .events import InstructionInfo, MemberStats
from .stats import MeanInterval, mean_of_means_interval

Origin = Literal["seed", "reflection", "paraphrase", "history", "manual", "human"]
"""Where an instruction came from: `manual` ones were in the config, `human` ones a person injected into the running
run (see `control`)."""


@dataclass
class Instruction:
    """One instruction, alive or retired, with everything the lineage view needs."""

    id: str
    text: str
    origin: Origin
    parent_id: str | None
    birth_step: int
    prune_step: int | None = None
    removal_reason: str | None = None
    verify_score: float | None = None
    rewards: list[tuple[int, float]] = field(default_factory=list)
    """(step, mean reward over the groups it was used for in that step), over its whole life."""
    weight_from_step: int = -1
    """Only rewards of later steps count towards the weight: a reset sets it to the step of the reset."""
    samples: int = 0
    """Questions it was sampled for, over the whole run."""
    author: str | None = None
    """Who wrote it, for an instruction a person injected (origin `human`)."""
    pinned: bool = False
    """Pinned by a person: pruning and evolution's replacement never retire it."""
    recent_groups: list[tuple[int, list[float]]] = field(default_factory=list)
    """(step, each of its groups' mean reward in that step) for the last steps its weight can count (at most the
    population's weight window): the spread behind `recent_interval`."""

    @property
    def alive(self) -> bool:
        return self.prune_step is None

    def weight(self, window: int) -> float:
        """Moving average of the last `window` per-step mean rewards; 0 before its first use."""
        recent = [r for step, r in self.rewards if step > self.weight_from_step][-window:]
        return sum(recent) / len(recent) if recent else 0.0

    def recent_interval(self, window: int, *, level: float = 0.95) -> MeanInterval:
        """The mean of its last `window` per-step mean rewards (its weight, when the population is weighted) with a
        `level` interval from the spread of the groups behind them (`stats.mean_of_means_interval`), and their count.

        >>> ins = Instruction("ins-0000", "x", "seed", None, 0, recent_groups=[(1, [0.2, 0.4]), (2, [0.3, 0.3])])
        >>> iv = ins.recent_interval(5)
        >>> round(iv.mean, 3), iv.n, round(iv.low, 3), round(iv.high, 3)
        (0.3, 4, 0.17, 0.43)
        """
        kept = [groups for step, groups in self.recent_groups if step > self.weight_from_step][-window:]
        return mean_of_means_interval(kept, level=level)

    def lifetime_reward(self) -> float | None:
        """Mean of every per-step reward it ever had (for the history proposer), None if never used."""
        return sum(r for _, r in self.rewards) / len(self.rewards) if self.rewards else None

    def info(self) -> InstructionInfo:
        return InstructionInfo(self.id, self.text, self.origin, self.parent_id, self.birth_step, self.author)


def softmax(weights: Sequence[float], temperature: float) -> list[float]:
    """Sampling probabilities softmax(w / τ), computed stably.

    >>> [round(p, 3) for p in softmax([0.0, 0.0], 0.2)]
    [0.5, 0.5]
    >>> [round(p, 3) for p in softmax([1.0, 0.0], 0.2)]
    [0.993, 0.007]
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    scaled = [w / temperature for w in weights]
    top = max(scaled)
    exps = [math.exp(s - top) for s in scaled]
    total = sum(exps)
    return [e / total for e in exps]


class Population:
    """The alive instructions and the archive of every instruction ever born (for lineage)."""

    def __init__(
        self, *, max_size: int, n_parents: int, temperature: float, weight_window: int, weighted: bool = True
    ) -> None:
        """`weighted` False: every weight stays 0 whatever the rewards, so sampling is uniform and the ranking (and
        I*) is birth order (the random-pool arm); rewards are still recorded for the record."""
        self.max_size = max_size
        self.weighted = weighted
        self.n_parents = n_parents
        self.temperature = temperature
        self.weight_window = weight_window
        self.archive: dict[str, Instruction] = {}
        self._last_step_rewards: dict[str, float] = {}
        self._last_step_samples: dict[str, int] = {}

    # -- membership ----------------------------------------------------------------------------------------

    @property
    def members(self) -> list[Instruction]:
        """Alive instructions in birth order."""
        return [ins for ins in self.archive.values() if ins.alive]

    def __len__(self) -> int:
        return len(self.members)

    def get(self, instruction_id: str) -> Instruction:
        return self.archive[instruction_id]

    def add(
        self,
        text: str,
        *,
        origin: Origin,
        step: int,
        parent_id: str | None = None,
        verify_score: float | None = None,
        author: str | None = None,
    ) -> Instruction:
        """Add a new alive instruction with a fresh id and weight 0."""
        if len(self) >= self.max_size:
            raise ValueError(f"population is full ({self.max_size})")
        instruction = Instruction(
            id=f"ins-{len(self.archive):04d}",
            text=text,
            origin=origin,
            parent_id=parent_id,
            birth_step=step,
            verify_score=verify_score,
            author=author,
        )
        self.archive[instruction.id] = instruction
        return instruction

    def retire(self, instruction_id: str, *, step: int, reason: str) -> Instruction:
        instruction = self.archive[instruction_id]
        if not instruction.alive:
            raise ValueError(f"{instruction_id} is already retired")
        if len(self) <= 1:
            raise ValueError("the population cannot become empty")
        instruction.prune_step = step
        instruction.removal_reason = reason
        return instruction

    def contains_text(self, text: str) -> bool:
        key = " ".join(text.split()).lower()
        return any(" ".join(ins.text.split()).lower() == key for ins in self.members)

    # -- weights and sampling ------------------------------------------------------------------------------

    def weight_of(self, instruction: Instruction) -> float:
        """w_j: the moving average of its recent rewards (see `Instruction.weight`); always 0 when not weighted."""
        return instruction.weight(self.weight_window) if self.weighted else 0.0

    def weights(self) -> dict[str, float]:
        return {ins.id: self.weight_of(ins) for ins in self.members}

    def probabilities(self) -> dict[str, float]:
        members = self.members
        probs = softmax([self.weight_of(m) for m in members], self.temperature)
        return {m.id: p for m, p in zip(members, probs, strict=True)}

    def sample(self, rng: random.Random, n: int) -> list[Instruction]:
        """Draw one instruction per question, with replacement, by softmax(w / τ)."""
        members = self.members
        probs = softmax([self.weight_of(m) for m in members], self.temperature)
        return rng.choices(members, weights=probs, k=n)

    def record_step(self, step: int, rewards: Mapping[str, Iterable[float]]) -> None:
        """Attribute a step's group-mean rewards: each used instruction gets the mean over its groups."""
        self._last_step_rewards = {}
        self._last_step_samples = {}
        for instruction_id, group_means in rewards.items():
            values = list(group_means)
            if not values:
                continue
            mean = sum(values) / len(values)
            instruction = self.archive[instruction_id]
            instruction.rewards.append((step, mean))
            instruction.recent_groups = [*instruction.recent_groups, (step, values)][-self.weight_window :]
            instruction.samples += len(values)
            self._last_step_rewards[instruction_id] = mean
            self._last_step_samples[instruction_id] = len(values)

    def reset_weights(self, step: int, ids: Iterable[str] | None = None) -> None:
        """Weights back to 0 (the moving average restarts after `step`) for `ids`, or for every alive one."""
        for instruction_id in ids if ids is not None else [m.id for m in self.members]:
            self.archive[instruction_id].weight_from_step = step

    def ranked(self) -> list[Instruction]:
        """Alive instructions, best first: by weight, then the older one on ties."""
        order = {ins.id: i for i, ins in enumerate(self.archive.values())}
        return sorted(self.members, key=lambda m: (-self.weight_of(m), order[m.id]))

    def best(self) -> Instruction:
        """I* = argmax_j w_j."""
        return self.ranked()[0]

    def top(self, n: int) -> list[Instruction]:
        return self.ranked()[:n]

    # -- pruning -------------------------------------------------------------------------------------------

    def prune(self, step: int) -> list[Instruction]:
        """Successive halving: drop the bottom half by weight, never going below n_parents. Pinned instructions
        stand outside it: they all stay, and the others are halved (never below n_parents) as if they were not
        there."""
        unpinned = [ins for ins in self.ranked() if not ins.pinned]
        size = len(unpinned)
        if size <= self.n_parents:
            return []
        keep = max(self.n_parents, size - size // 2)
        dropped = unpinned[keep:]
        for instruction in dropped:
            self.retire(instruction.id, step=step, reason="pruned")
        return dropped

    # -- snapshots and state -------------------------------------------------------------------------------

    def snapshot(self) -> list[MemberStats]:
        """Per member: weight, sampling probability, samples and mean reward in the last recorded step, and the mean
        of its recent per-step rewards (what its weight averages) with a 95 % interval and the groups behind it."""
        probs = self.probabilities()
        stats = []
        for m in self.members:
            recent = m.recent_interval(self.weight_window)
            stats.append(
                MemberStats(
                    id=m.id,
                    weight=self.weight_of(m),
                    probability=probs[m.id],
                    samples=self._last_step_samples.get(m.id, 0),
                    mean_reward=self._last_step_rewards.get(m.id),
                    recent_reward=recent.mean,
                    recent_low=recent.low,
                    recent_high=recent.high,
                    recent_samples=recent.n,
                )
            )
        return stats

    def to_state(self) -> dict[str, Any]:
        return {
            "archive": [asdict(ins) for ins in self.archive.values()],
            "last_step_rewards": self._last_step_rewards,
            "last_step_samples": self._last_step_samples,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.archive = {}
        for data in state["archive"]:
            data = dict(data)
            data["rewards"] = [(int(s), float(r)) for s, r in data["rewards"]]
            data["recent_groups"] = [(int(s), [float(r) for r in rs]) for s, rs in data.get("recent_groups", [])]
            self.archive[data["id"]] = Instruction(**data)
        self._last_step_rewards = dict(state["last_step_rewards"])
        self._last_step_samples = dict(state["last_step_samples"])
