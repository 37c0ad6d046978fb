"""The torch rollout engine's lagged decoding (the GPU default, run here on the CPU): each step's tokens are read back
one forward late, and the rollouts are exactly those of the synchronous loop."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from inspo_engine.backends.torch.rollout import RolloutEngine, RolloutSettings
from inspo_engine.backends.torch.samples import RolloutSample
from inspo_engine.config import SEED_INSTRUCTION
from inspo_engine.types import Question

from .conftest import EchoRetriever

CPU = torch.device("cpu")
PERU = Question("peru", "What is the capital of Peru?", ("Lima",))
HAMLET = Question("hamlet", "Who wrote Hamlet?", ("William Shakespeare",))
SUM = Question("sum", "What is 2 + 2?", ("4",))
RAMBLE = "Paris is a lovely city with old bridges, wide avenues, small cafes and many museums along the river banks"


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


class ScriptedEngine(RolloutEngine):
    """Draws every token as usual, then overwrites the scripted rows' first tokens (on the device, so that the
    lagged loop still runs)."""

    def __init__(self, *args: Any, scripts: dict[int, list[int]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scripts = scripts

    def generate(self, items, **kwargs):
        self._queues = {index: deque(script) for index, script in self.scripts.items()}
        return super().generate(items, **kwargs)

    def _choose(self, logits, rows, greedy, generator):
        chosen = super()._choose(logits, rows, greedy, generator)
        for i, row in enumerate(rows):
            queue = self._queues.get(row.index)
            if queue:
                chosen[i] = queue.popleft()
        return chosen


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def both_ways(smollm2, seed: int | None, **overrides: Any) -> tuple[list[RolloutSample], list[RolloutSample], list]:
    """(synchronous samples, lagged samples, [retriever calls and decode batch sizes of each]) of one batch: rows
    that search twice (stopping at </search>), search then answer, ramble into the turn budget, or sample freely."""
    model, tokenizer = smollm2
    search = encode(tokenizer, "<search> capital of Peru </search>")
    scripts = {
        0: search + encode(tokenizer, "<search> everything about Peru </search>"),  # two searches, a long observation
        1: search + encode(tokenizer, "<answer> Lima </answer>"),  # search, then answer
        2: encode(tokenizer, RAMBLE)[:20],  # cut at the turn budget, then the note
        3: encode(tokenizer, "<answer> 4 </answer>"),  # answers at once: leaves the batch early
    }
    values: dict[str, Any] = {"max_turns": 2, "max_turn_tokens": 12, "max_obs_tokens": 48, "max_prompt_length": 1024}
    settings = RolloutSettings(top_k=2, **(values | overrides))
    items = [(SEED_INSTRUCTION, q) for q in (PERU, PERU, HAMLET, SUM, PERU, HAMLET)]
    runs = []
    for lagged in (False, True):
        retriever = EchoRetriever()
        engine = ScriptedEngine(model, tokenizer, retriever, settings, device=CPU, scripts=scripts,
                                record_logprobs=True)  # fmt: skip
        engine._lagged = lagged
        sizes: list[int] = []

        def count(_module: Any, _args: Any, kwargs: Any, sizes: list[int] = sizes) -> None:
            if kwargs["input_ids"].shape[1] == 1:
                sizes.append(kwargs["input_ids"].shape[0])

        hook = model.get_decoder().register_forward_pre_hook(count, with_kwargs=True)
        try:
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            samples = engine.generate(items, greedy=seed is None, generator=generator)
        finally:
            hook.remove()
        runs.append((samples, (retriever.calls, sizes)))
    return runs[0][0], runs[1][0], [runs[0][1], runs[1][1]]


def test_the_engine_decodes_lagged_on_a_gpu_only(smollm2):
    model, tokenizer = smollm2
    settings = RolloutSettings(max_turns=1, max_turn_tokens=4, max_obs_tokens=8, max_prompt_length=64, top_k=1)
    assert not RolloutEngine(model, tokenizer, EchoRetriever(), settings, device=CPU)._lagged


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lagged_decoding_gives_exactly_the_synchronous_rollouts_and_log_probs(smollm2, seed):
    sync, lagged, ((sync_calls, sync_sizes), (lagged_calls, lagged_sizes)) = both_ways(smollm2, seed)
    assert lagged == sync  # tokens, masks, texts, answers, turns, truncation and recorded log-probs, bit for bit
    assert lagged_calls == sync_calls
    # the lagged loop reads every step's tokens before it knows who finished (then again without the finished rows)
    assert len(lagged_sizes) > len(sync_sizes)
    kinds = {(s.tool_calls, s.truncated, s.answer is not None) for s in sync}
    assert (2, False, False) in kinds or (2, True, False) in kinds  # row 0 searched twice
    assert sync[1].answer == "Lima" and sync[3].answer == "4" and sync[3].turns == 1
    assert all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.response_ids) for s in sync)


def test_lagged_decoding_matches_with_top_p_and_when_greedy(smollm2):
    sync, lagged, _ = both_ways(smollm2, 7, temperature=0.7, top_p=0.9)
    assert lagged == sync
    sync, lagged, _ = both_ways(smollm2, None)
    assert lagged == sync
    assert all(s.rollout_logprobs is None for s in lagged)  # greedy rollouts never record


def test_a_rollout_cut_at_the_token_budget_is_truncated_the_same_way_lagged(smollm2):
    sync, lagged, _ = both_ways(smollm2, 5, max_turns=0, max_turn_tokens=6)
    assert lagged == sync
    assert any(s.truncated for s in lagged)
    assert all(sum(s.response_mask) <= 6 for s in lagged)
