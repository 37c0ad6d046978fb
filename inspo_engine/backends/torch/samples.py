"""Token-level data passed from the rollout engine to the GRPO trainer; no behaviour."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RolloutSample:
    """One finished multi-turn rollout, as tokens.

    `response_ids` is everything after the prompt: the model's own tokens and the observation tokens appended
    between turns. `response_mask` is 1 for the model's tokens (trained) and 0 for observations (never trained).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_text: str
    answer: str | None
    tool_calls: int
    turns: int
    error: str | None = None
    rollout_logprobs: list[float] | None = None
    """log π(token) of each response token under the weights that sampled it, at temperature 1 (0.0 on observation
    tokens); None when the engine does not record them (see `RolloutEngine`'s `record_logprobs`)."""
    truncated: bool = False
    """The last turn was cut by the token limit before it closed, or the context filled: the reply was not
    finished (DAPO's overlong filtering leaves such replies out of the loss)."""


@dataclass
class TrainSample:
    """A rollout with its group-normalised advantage, ready for the policy loss."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    advantage: float
    rollout_logprobs: list[float] | None = None
    """`RolloutSample.rollout_logprobs`, for the rollout correction and its mismatch metrics (None: not recorded)."""
