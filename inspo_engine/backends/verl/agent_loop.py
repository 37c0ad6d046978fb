"""The Search-R1 agent loop for verl: multi-turn generation through verl's inference servers, with searches between
turns; it knows tokens, the protocol and the reward, nothing about the population or training.

verl instantiates one `SearchR1AgentLoop` per trajectory inside its agent-loop workers (Ray actors) and awaits
`run`. Each turn sends the whole context so far (prompt, turns, observations) as token ids to the server manager
with the stop strings and the turn's token budget; the ids it returns are appended as they are (mask 1) and only
decoded to read the action. Passages come from a Search-R1 `/retrieve` server and are appended with mask 0. The
reward (the run's `env.reward`) is computed here, so verl's reward workers have nothing to do.

When the job was given a retriever policy (`launcher.RETRIEVER_POLICY`), the /retrieve client checks the URL against
it when it is built and every request again (DNS rebinding included), as the torch backend's retriever does.

It is registered under `AGENT_NAME` when this module is imported; verl imports it in every process through the
`verl.plugins` entry point that this package installs (see pyproject.toml).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from ...env.protocol import STOP_STRINGS, Passage, Retriever
from ...env.retrievers import RemoteRetriever
from ...netpolicy import NetPolicy
from .launcher import RETRIEVER_POLICY, job_policy
from .overrides import AGENT_NAME
from .turns import Episode, TurnLimits, note_ids, observation_ids


@functools.cache
def remote_retriever(url: str, policy: NetPolicy | None = None) -> Retriever:
    """One /retrieve client per URL, policy and process, shared by every trajectory the worker runs; with a policy
    it refuses a URL the policy forbids now (UrlRefused) and checks and pins every request again (None: the URL is
    the operator's own)."""
    return RemoteRetriever(url, policy=policy)


def golden_answers(reward_model: Any) -> tuple[str, ...]:
    """The gold answers of a row: `reward_model["ground_truth"]["target"]` (Search-R1's layout); parquet hands
    lists back as numpy arrays.

    >>> golden_answers({"ground_truth": {"target": ["Lima", "Lima, Peru"]}})
    ('Lima', 'Lima, Peru')
    """
    target = reward_model["ground_truth"]["target"]
    return (str(target),) if isinstance(target, str) else tuple(str(t) for t in target)


@register(AGENT_NAME)
class SearchR1AgentLoop(AgentLoopBase):
    """`<search>` → retrieval → `<information>` until `<answer>` or the turn limit; reward = the run's `env.reward`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        multi_turn, inspo = self.rollout_config.multi_turn, self.config.inspo
        self.limits = TurnLimits(
            max_turns=int(multi_turn.max_assistant_turns),
            max_turn_tokens=int(inspo.max_turn_tokens),
            max_obs_tokens=int(multi_turn.max_tool_response_length),
            response_length=int(self.rollout_config.response_length),
            top_k=int(inspo.top_k),
            reward=str(inspo.get("reward", "em")),
            format_score=float(inspo.get("format_score", 0.2)),
            retrieval_score=float(inspo.get("retrieval_score", 0.1)),
            answer_score=float(inspo.get("answer_score", 0.0)),
            format_requires_search=bool(inspo.get("format_requires_search", False)),
            f1_score=float(inspo.get("f1_score", 0.0)),
        )
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.retriever = remote_retriever(str(inspo.retriever_url), job_policy(inspo, RETRIEVER_POLICY))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One rollout of the row in `kwargs` (`raw_prompt` messages with the instruction as the system message,
        `reward_model` with the gold answers)."""
        priority = int(kwargs.get("priority", 0))
        episode = Episode(self.limits, golden_answers(kwargs["reward_model"]))
        prompt_ids = self.prompt_ids(list(kwargs["raw_prompt"]))
        metrics: dict[str, Any] = {"generate_sequences": 0.0, "tool_calls": 0.0}
        if len(prompt_ids) > self.prompt_length:
            episode.done = True
            episode.error = f"prompt has {len(prompt_ids)} tokens, more than prompt_length ({self.prompt_length})"
            prompt_ids = prompt_ids[-self.prompt_length :]
        request_id = uuid4().hex
        while not episode.done:
            query = await self._turn(request_id, prompt_ids, episode, sampling_params, priority, metrics)
            if query is None:
                break
            with simple_timer("tool_calls", metrics):
                ids = await self._observe(query) if query else note_ids(self.tokenizer)
            episode.tool_calls += bool(query)
            episode.add_observation(ids)
        return self._output(prompt_ids, episode, metrics)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The chat prompt as the torch backend builds it: the chat template as text, then encoded."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.apply_chat_template_kwargs
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def _turn(
        self,
        request_id: str,
        prompt_ids: list[int],
        episode: Episode,
        sampling_params: dict[str, Any],
        priority: int,
        metrics: dict[str, Any],
    ) -> str | None:
        params = {
            **sampling_params,
            "max_tokens": episode.turn_budget(),
            "stop": list(STOP_STRINGS),
            "include_stop_str_in_output": True,
        }
        with simple_timer("generate_sequences", metrics):
            output = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=prompt_ids + episode.response_ids,
                sampling_params=params,
                priority=priority,
            )
        ids = list(output.token_ids)[: episode.turn_budget()]
        logprobs = list(output.log_probs)[: len(ids)] if output.log_probs else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return episode.add_turn(ids, text, logprobs)

    async def _observe(self, query: str) -> list[int]:
        loop = asyncio.get_running_loop()
        results: list[list[Passage]] = await loop.run_in_executor(
            None, self.retriever.search, [query], self.limits.top_k
        )
        return observation_ids(self.tokenizer, results[0], self.limits.max_obs_tokens)

    def _output(self, prompt_ids: Sequence[int], episode: Episode, metrics: dict[str, Any]) -> AgentLoopOutput:
        text = self.tokenizer.decode(episode.response_ids, skip_special_tokens=True)
        logprobs = episode.response_logprobs if self.rollout_config.calculate_log_probs else None
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=episode.response_ids,
            response_mask=episode.response_mask,
            response_logprobs=logprobs,
            reward_score=episode.reward(text),
            num_turns=2 * episode.turns,
            metrics=AgentLoopMetrics(**metrics),
            extra_fields={**episode.summary(text), "turn_scores": [], "tool_rewards": []},
        )
