"""One Search-R1 rollout as token ids: turns, observations, masks and budgets; no model, server or retriever.

The verl agent loop feeds it what the inference server returned and what the retriever found; it decides when the
rollout ends, what gets appended with mask 0, and what the rollout scored. The rules are the torch backend's
(`backends.torch.rollout`): a turn that answers, or the last allowed turn, ends the rollout; a search with a query
gets its passages; anything else gets the invalid-action note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...env.protocol import INVALID_ACTION_NOTE, Passage, most_turns, observation, parse_action, rollout_over
from ...env.rewards import REWARDS, exact_match, f1

CLOSING = "</information>\n\n"
"""Kept at the end of an observation cut to max_obs_tokens, so the model still sees the block close."""


class Tokenizer(Protocol):
    """What the episode needs of a Hugging Face tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class TurnLimits:
    """The protocol's limits (INSPO.md: 4 turns for 3B, 6 for 7B; 500 tokens per turn and per observation)."""

    max_turns: int
    """Turns that may search (Search-R1's count); one more, final turn may only answer."""
    max_turn_tokens: int
    """Tokens the server may generate in one turn."""
    max_obs_tokens: int
    """Observations longer than this are cut, keeping their closing tag."""
    response_length: int
    """All response tokens (turns and observations) must fit here: verl pads every response to this length."""
    top_k: int = 3
    """Passages per search."""
    reward: str = "em"
    """The training reward's name in `rewards.REWARDS` (the run's `env.reward`)."""
    format_score: float = 0.2
    """em_format's partial credit for a well-formed trajectory."""
    retrieval_score: float = 0.1
    """em_format's bonus when a retrieved passage held a gold answer."""
    answer_score: float = 0.0
    """em_format's credit for a wrong answer in a malformed trajectory."""
    format_requires_search: bool = False
    """em_format: the well-formed credit only for a trajectory that searched."""
    f1_score: float = 0.0
    """em_format: the share of a wrong answer's token F1 a well-formed trajectory earns."""


def response_length_for(max_turns: int, max_turn_tokens: int, max_obs_tokens: int) -> int:
    """The response budget that lets every turn and every observation reach its own limit.

    >>> response_length_for(4, 500, 500)
    4500
    """
    return most_turns(max_turns) * max_turn_tokens + max_turns * max_obs_tokens


@dataclass
class Episode:
    """The running state of one rollout. `response_mask` is 1 for the model's tokens, 0 for observations."""

    limits: TurnLimits
    golden_answers: tuple[str, ...]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    answer: str | None = None
    done: bool = False
    error: str | None = None

    def turn_budget(self) -> int:
        """Tokens the next turn may generate: the per-turn limit, or what is left of the response budget."""
        return min(self.limits.max_turn_tokens, self.limits.response_length - len(self.response_ids))

    def add_turn(self, token_ids: Sequence[int], text: str, logprobs: Sequence[float] | None = None) -> str | None:
        """Append a model turn exactly as the server returned it. Returns None when the rollout is over, the
        search query when the turn asked one, and "" when it had no usable action (the note comes next).

        `text` is the decoded turn, used only to read the action: the ids are never re-encoded.
        """
        ids = list(token_ids)
        self.response_ids += ids
        self.response_mask += [1] * len(ids)
        self.response_logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)
        self.turns += 1
        action = parse_action(text)
        if rollout_over(action, self.turns, self.limits.max_turns):
            self.answer = action.content if action.kind == "answer" else None
            self.done = True
            return None
        if self.turn_budget() <= 0:
            self.finish_truncated()
            return None
        if action.kind == "search" and action.content:
            return action.content
        return ""

    def add_observation(self, token_ids: Sequence[int]) -> None:
        """Append masked tokens (passages or the invalid-action note); the rollout ends if no turn would fit after."""
        ids = list(token_ids)
        if len(self.response_ids) + len(ids) >= self.limits.response_length:
            self.finish_truncated()
            return
        self.response_ids += ids
        self.response_mask += [0] * len(ids)
        self.response_logprobs += [0.0] * len(ids)

    def finish_truncated(self) -> None:
        self.done = True
        self.error = f"response budget of {self.limits.response_length} tokens spent after {self.turns} turns"

    def reward(self, response_text: str) -> float:
        """The run's training reward of this rollout (exact match of the final answer under `em`)."""
        limits = self.limits
        (value,) = REWARDS[limits.reward](
            [response_text],
            golden_answers=[self.golden_answers],
            answers=[self.answer],
            format_score=limits.format_score,
            retrieval_score=limits.retrieval_score,
            answer_score=limits.answer_score,
            format_requires_search=limits.format_requires_search,
            f1_score=limits.f1_score,
        )
        return value

    def summary(self, response_text: str) -> dict[str, Any]:
        """What the trainer reads back per trajectory (verl carries it in `extra_fields`)."""
        return {
            "inspo_reward": self.reward(response_text),
            "inspo_em": exact_match(self.answer, self.golden_answers),
            "inspo_f1": f1(self.answer, self.golden_answers),
            "inspo_answer": self.answer,
            "inspo_tool_calls": self.tool_calls,
            "inspo_turns": self.turns,
            "inspo_error": self.error,
            "inspo_response": response_text,
            "inspo_response_tokens": sum(self.response_mask),
        }


def observation_ids(tokenizer: Tokenizer, passages: Sequence[Passage], limit: int) -> list[int]:
    """The observation's tokens, cut to `limit`; a cut one still ends with its closing tag."""
    ids = list(tokenizer.encode(observation(passages), add_special_tokens=False))
    if len(ids) <= limit:
        return ids
    closing = list(tokenizer.encode(CLOSING, add_special_tokens=False))
    closing = closing if len(closing) < limit else []
    return ids[: limit - len(closing)] + closing


def note_ids(tokenizer: Tokenizer) -> list[int]:
    """The invalid-action note as tokens."""
    return list(tokenizer.encode(INVALID_ACTION_NOTE, add_special_tokens=False))
