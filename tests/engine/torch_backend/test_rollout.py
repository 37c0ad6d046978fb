"""The rollout engine on the real SmolLM2-135M: the Search-R1 protocol, masks, the KV cache, batching, determinism.

The protocol tests script some rows: a test-only engine replaces the model's choice by a scripted token while a row's
script lasts, so searches, answers and broken turns happen whatever the small model would write. The model still
reads every token, so the unscripted tokens that follow are checked against a plain full forward pass.
"""

from __future__ import annotations

import copy
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inspo_engine.backends.torch.rollout import RolloutEngine, RolloutSettings, _shared_prefixes, _spans
from inspo_engine.backends.torch.rollout_weights import RolloutWeights, _onednn_bfloat16, _PackedLinear
from inspo_engine.backends.torch.samples import RolloutSample
from inspo_engine.backends.torch.sampling import SAMPLE_BLOCK, sample_tokens
from inspo_engine.config import SEED_INSTRUCTION, EnvConfig
from inspo_engine.env.protocol import INVALID_ACTION_NOTE, observation
from inspo_engine.env.rewards import extract_answer, is_valid_format
from inspo_engine.types import Question

from .conftest import EchoRetriever, copy_mismatches, freed_weights, packed_layers

CPU = torch.device("cpu")
PERU = Question("peru", "What is the capital of Peru?", ("Lima",))
HAMLET = Question("hamlet", "Who wrote Hamlet?", ("William Shakespeare",))
SEINE = Question("seine", "Which river flows through Paris, the capital of France?", ("Seine",))
SUM = Question("sum", "What is 2 + 2?", ("4",))
OBS_LIMIT = 64
RAMBLE = (
    "Paris is a lovely city with old bridges, wide avenues, small cafes and many museums along the river banks, "
    "and in the spring the parks fill with people who read, talk and walk for hours"
)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """These tests need no parallelism, and one thread stays fast on a busy shared CPU (two can stall each other)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


class ScriptedEngine(RolloutEngine):
    """Forces the given rows to write scripted tokens first; records every token each row was given."""

    def __init__(self, *args: object, scripts: dict[int, list[int]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.scripts = scripts
        self.given: dict[int, list[int]] = {}
        self.scripted: dict[int, list[bool]] = {}

    def generate(self, items, **kwargs):
        self._queues = {index: deque(script) for index, script in self.scripts.items()}
        return super().generate(items, **kwargs)

    def _next_tokens(self, logits, rows, greedy, generator):
        tokens = super()._next_tokens(logits, rows, greedy, generator)
        for i, row in enumerate(rows):
            queue = self._queues.get(row.index)
            forced = bool(queue)
            if forced:
                tokens[i] = queue.popleft()
            self.given.setdefault(row.index, []).append(tokens[i])
            self.scripted.setdefault(row.index, []).append(forced)
        return tokens


def settings(**overrides: Any) -> RolloutSettings:
    values = {"max_turns": 2, "max_turn_tokens": 24, "max_obs_tokens": OBS_LIMIT, "max_prompt_length": 1024, "top_k": 2}
    values.update(overrides)
    return RolloutSettings(**values)


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class ProtocolRun:
    engine: ScriptedEngine
    retriever: EchoRetriever
    samples: list[RolloutSample]
    scripts: dict[int, list[int]]
    batch_sizes: list[int]
    attention_before: str
    items: list[tuple[str, Question]]


@pytest.fixture(scope="module")
def run(smollm2) -> ProtocolRun:
    """One greedy batch of seven rows that between them hit every branch of the protocol (max_turns = 1: one turn
    that may search, then the final turn)."""
    model, tokenizer = smollm2
    turns = {
        "search_peru": "<think>I should look it up.</think><search> capital of Peru </search>",
        "answer_lima": "<answer> Lima </answer>",
        "search_long": "<search> everything about Peru </search>",
        "search_author": "<search> Hamlet author </search>",
        "search_date": "<search> Hamlet date </search>",
        "answer_4": "<answer> 4 </answer>",
    }
    ids = {name: encode(tokenizer, text) for name, text in turns.items()}
    scripts = {
        0: ids["search_peru"] + ids["answer_lima"],  # search, then answer
        1: ids["search_long"],  # search with an observation that gets cut; the model writes turn 2
        2: ids["search_author"] + ids["search_date"],  # searches again in the final turn, which may only answer
        3: encode(tokenizer, RAMBLE)[:30],  # no action: cut at the turn budget, then the note
        # 4: the model alone
        5: ids["answer_4"],  # answers at once and leaves the batch early
        6: ids["search_peru"] + ids["answer_lima"],  # the same as row 0: its search shares row 0's call
    }
    assert len(scripts[3]) == 30
    retriever = EchoRetriever()
    engine = ScriptedEngine(model, tokenizer, retriever, settings(max_turns=1), device=CPU, scripts=scripts)
    items = [(SEED_INSTRUCTION, q) for q in (PERU, PERU, HAMLET, SEINE, HAMLET, SUM, PERU)]
    sizes: list[int] = []
    hook = model.get_decoder().register_forward_pre_hook(  # the engine runs the decoder, then the head on one row
        lambda _module, _args, kwargs: (
            sizes.append(kwargs["input_ids"].shape[0]) if kwargs["input_ids"].shape[1] == 1 else None
        ),
        with_kwargs=True,
    )
    attention = model.config._attn_implementation
    try:
        samples = engine.generate(items, greedy=True)
    finally:
        hook.remove()
    return ProtocolRun(engine, retriever, samples, scripts, sizes, attention, items)


def observation_ids(tokenizer, query: str, k: int = 2) -> list[int]:
    return encode(tokenizer, observation([EchoRetriever.passage(query, i) for i in range(k)]))


# -- the protocol ----------------------------------------------------------------------------------------------


def test_a_search_stops_the_turn_and_its_passages_come_back_inside_information(run, smollm2):
    _, tokenizer = smollm2
    sample = run.samples[0]
    search = encode(tokenizer, "<think>I should look it up.</think><search> capital of Peru </search>")
    answer = encode(tokenizer, "<answer> Lima </answer>")
    obs = observation_ids(tokenizer, "capital of Peru")
    assert sample.response_ids == search + obs + answer
    assert sample.response_mask == [1] * len(search) + [0] * len(obs) + [1] * len(answer)
    assert "<information>Doc 1(Title: Title 0) Echo 0 of capital of Peru." in sample.response_text
    assert (sample.answer, sample.tool_calls, sample.turns, sample.error) == ("Lima", 1, 2, None)


def test_searches_that_end_in_the_same_step_share_one_retriever_call(run):
    assert ["capital of Peru", "capital of Peru"] in run.retriever.calls
    assert sum(len(call) for call in run.retriever.calls) == 4  # rows 0, 1, 2 and 6; never row 2's second search


def test_a_long_observation_is_cut_to_max_obs_tokens_and_keeps_its_closing_tag(run, smollm2):
    _, tokenizer = smollm2
    sample = run.samples[1]
    search = run.scripts[1]
    closing = encode(tokenizer, "</information>\n\n")
    full = observation_ids(tokenizer, "everything about Peru")
    assert len(full) > OBS_LIMIT
    assert sample.response_ids[len(search) : len(search) + OBS_LIMIT] == full[: OBS_LIMIT - len(closing)] + closing
    assert sample.response_mask[: len(search) + OBS_LIMIT] == [1] * len(search) + [0] * OBS_LIMIT
    assert sample.response_mask[len(search) + OBS_LIMIT :] == [1] * (len(sample.response_ids) - len(search) - OBS_LIMIT)
    assert sample.tool_calls == 1


def test_the_final_turn_after_max_turns_searching_turns_ends_the_rollout_without_running_its_search(run, smollm2):
    _, tokenizer = smollm2
    sample = run.samples[2]
    first, second = (
        encode(tokenizer, "<search> Hamlet author </search>"),
        encode(tokenizer, "<search> Hamlet date </search>"),
    )
    obs = observation_ids(tokenizer, "Hamlet author")
    assert sample.response_ids == first + obs + second
    assert sample.response_mask == [1] * len(first) + [0] * len(obs) + [1] * len(second)
    assert (sample.turns, sample.tool_calls, sample.answer) == (2, 1, None)
    assert not any("Hamlet date" in query for call in run.retriever.calls for query in call)


def test_a_turn_is_cut_at_the_token_budget_and_a_turn_without_action_gets_the_note(run, smollm2):
    _, tokenizer = smollm2
    sample = run.samples[3]
    note = encode(tokenizer, INVALID_ACTION_NOTE)
    assert sample.response_ids[:24] == run.scripts[3][:24]
    assert sample.response_ids[24 : 24 + len(note)] == note
    assert sample.response_mask[: 24 + len(note)] == [1] * 24 + [0] * len(note)
    assert sample.response_ids[24 + len(note) : 30 + len(note)] == run.scripts[3][24:]  # turn 2 goes on
    assert sample.turns == 2
    assert len(sample.response_ids) - len(note) <= 2 * 24


def test_an_answer_ends_the_rollout_at_once(run):
    sample = run.samples[5]
    assert sample.response_ids == run.scripts[5]
    assert (sample.answer, sample.turns, sample.tool_calls) == ("4", 1, 0)


def test_the_answer_comes_from_the_final_turn_and_the_note_holds_no_answer(run):
    for sample in (run.samples[3], run.samples[4]):
        assert INVALID_ACTION_NOTE.strip() in sample.response_text
        assert sample.answer == extract_answer(sample.response_text[sample.response_text.rfind("]") :])
        assert sample.answer == extract_answer(sample.response_text)


# -- tokens and masks ------------------------------------------------------------------------------------------


def test_masks_line_up_model_tokens_are_exactly_the_sampled_ones_and_the_text_decodes_from_the_ids(run, smollm2):
    _, tokenizer = smollm2
    note = encode(tokenizer, INVALID_ACTION_NOTE)
    for index, sample in enumerate(run.samples):
        assert len(sample.response_ids) == len(sample.response_mask)
        model_tokens = [t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m == 1]
        assert model_tokens == run.engine.given[index]
        assert sample.response_text == tokenizer.decode(sample.response_ids, skip_special_tokens=True)
        for block in masked_blocks(sample):
            text = tokenizer.decode(block)
            assert block == note or (text.startswith("\n\n<information>") and text.endswith("</information>\n\n"))
        assert sample.prompt_ids == run.engine.prompt_ids(*run.items[index])


def masked_blocks(sample: RolloutSample) -> list[list[int]]:
    blocks: list[list[int]] = []
    previous = 1
    for token, mask in zip(sample.response_ids, sample.response_mask, strict=True):
        if mask == 0:
            if previous == 1:
                blocks.append([])
            blocks[-1].append(token)
        previous = mask
    return blocks


# -- the cache and the batch -----------------------------------------------------------------------------------


def test_tokens_after_prompts_and_observations_match_a_plain_forward_over_the_whole_sequence(run, smollm2):
    """Greedy tokens must be the argmax of the model re-reading everything from scratch (its own attention)."""
    model, _ = smollm2
    checked = 0
    for index, sample in enumerate(run.samples):
        sequence = torch.tensor([sample.prompt_ids + sample.response_ids])
        with torch.inference_mode():
            logits = model(input_ids=sequence).logits[0].float()
        start = len(sample.prompt_ids)
        model_positions = [p for p, m in enumerate(sample.response_mask) if m == 1]
        for step, position in enumerate(model_positions):
            if run.engine.scripted[index][step]:
                continue
            row = logits[start + position - 1]
            assert row[sample.response_ids[position]] >= row.max() - 1e-3, (index, position)
            checked += 1
    assert checked >= 24


class RecordingEngine(RolloutEngine):
    """Keeps the logits each row's every token was chosen from, by row index."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.logits: dict[int, list[torch.Tensor]] = {}

    def _next_tokens(self, logits, rows, greedy, generator):
        for row, row_logits in zip(rows, logits, strict=True):
            self.logits.setdefault(row.index, []).append(row_logits.clone())
        return super()._next_tokens(logits, rows, greedy, generator)


@pytest.mark.parametrize("share_prefixes", [True, False], ids=["shared-prefixes", "copied-prefixes"])
def test_every_steps_logits_are_those_of_a_full_forward_pass_to_float32_tolerance(smollm2, share_prefixes):
    """The cache (each prompt and shared prefix read once, then kept once or copied to every row; rows written in
    place; finished rows dropped) and the head applied to each row's last state give the logits of the model
    re-reading the whole sequence, searches and observations included."""
    model, tokenizer = smollm2
    engine = RecordingEngine(model, tokenizer, EchoRetriever(), settings(max_turns=1, max_turn_tokens=12), device=CPU)
    engine.share_prefixes = share_prefixes
    brief = "Search first, then answer in <answer> tags."
    items = [
        (SEED_INSTRUCTION, PERU),
        (SEED_INSTRUCTION, PERU),
        (brief, HAMLET),
        (SEED_INSTRUCTION, SEINE),
        (brief, SUM),
    ]
    samples = engine.generate(items, generator=torch.Generator().manual_seed(4))
    for index, sample in enumerate(samples):
        sequence = torch.tensor([sample.prompt_ids + sample.response_ids])
        with torch.inference_mode():
            logits = model(input_ids=sequence).logits[0, len(sample.prompt_ids) - 1 : -1]
        expected = logits[[p for p, m in enumerate(sample.response_mask) if m == 1]]
        got = torch.stack(engine.logits[index])
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-4)


def test_greedy_rollouts_write_the_tokens_transformers_generate_writes(smollm2):
    model, tokenizer = smollm2
    engine = RolloutEngine(model, tokenizer, EchoRetriever(), settings(max_turns=0, max_turn_tokens=16), device=CPU)
    items = [(SEED_INSTRUCTION, q) for q in (PERU, HAMLET, SEINE, SUM)]
    samples = engine.generate(items, greedy=True)
    for sample in samples:
        prompt = torch.tensor([sample.prompt_ids])
        with torch.inference_mode():
            out = model.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                max_new_tokens=16,
                pad_token_id=tokenizer.pad_token_id,
            )
        written = out[0, prompt.shape[1] :].tolist()
        assert len(sample.response_ids) >= 4  # the turn may end at a stop string, where generate goes on
        assert sample.response_ids == written[: len(sample.response_ids)]


def test_finished_rows_leave_the_batch(run):
    sizes = run.batch_sizes
    assert sizes[0] == 7
    assert all(later <= earlier for earlier, later in itertools.pairwise(sizes))
    assert sizes[len(run.scripts[5])] < 7  # row 5 answered within its first len(script) tokens
    assert sizes[-1] < 3


def test_generation_gives_the_model_its_attention_and_training_mode_back(run, smollm2):
    model, _ = smollm2
    assert model.config._attn_implementation == run.attention_before
    assert not model.training


# -- sampling --------------------------------------------------------------------------------------------------


def test_the_same_generator_seed_gives_the_same_rollouts(smollm2):
    model, tokenizer = smollm2
    engine = RolloutEngine(model, tokenizer, EchoRetriever(), settings(max_turns=0, max_turn_tokens=6), device=CPU)
    items = [(SEED_INSTRUCTION, q) for q in (PERU, PERU, HAMLET)]

    def ids(seed: int) -> list[list[int]]:
        samples = engine.generate(items, generator=torch.Generator().manual_seed(seed))
        return [sample.response_ids for sample in samples]

    first = ids(5)
    assert ids(5) == first
    assert ids(6) != first


def test_a_prompt_over_max_prompt_length_gives_an_error_sample_and_the_others_still_run(smollm2):
    model, tokenizer = smollm2
    probe = RolloutEngine(model, tokenizer, EchoRetriever(), settings(), device=CPU)
    short, long = (len(probe.prompt_ids(SEED_INSTRUCTION, q)) for q in (SUM, SEINE))
    engine = RolloutEngine(
        model, tokenizer, EchoRetriever(), settings(max_prompt_length=short, max_turns=0, max_turn_tokens=3), device=CPU
    )
    bad, good = engine.generate([(SEED_INSTRUCTION, SEINE), (SEED_INSTRUCTION, SUM)], greedy=True)
    assert short < long
    assert bad.error is not None and f"{long} tokens" in bad.error
    assert (bad.response_ids, bad.response_mask, bad.answer, bad.turns) == ([], [], None, 0)
    assert good.error is None and good.turns == 1 and 1 <= len(good.response_ids) <= 3


def one_level_sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The sampler before the two-level one: inverse CDF over one full-vocabulary float64 cumulative sum."""
    cdf = logits.softmax(dim=-1).double().cumsum(dim=-1)
    draws = torch.rand(cdf.shape[0], 1, generator=generator, dtype=torch.float64)
    return torch.searchsorted(cdf, draws * cdf[:, -1:], right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


def test_the_two_level_sampler_draws_what_one_cumulative_sum_over_the_vocabulary_draws():
    """Same uniform draw, same token, but where float32 block sums round a draw across a token boundary."""
    logits = torch.randn(64, 49_152, generator=torch.Generator().manual_seed(0)) * 3
    same = sum(
        int(
            (
                sample_tokens(logits, 1.0, 1.0, torch.Generator().manual_seed(seed))
                == one_level_sample(logits, torch.Generator().manual_seed(seed))
            ).sum()
        )
        for seed in range(20)
    )
    assert same >= 0.998 * 20 * 64


def test_the_sampler_never_draws_a_token_of_zero_weight():
    vocab = 3 * SAMPLE_BLOCK + 5  # the last block is padded
    logits = torch.full((4000, vocab), float("-inf"))
    allowed = [0, SAMPLE_BLOCK - 1, SAMPLE_BLOCK, 2 * SAMPLE_BLOCK + 7, vocab - 1]
    logits[:, allowed] = torch.tensor([0.0, -30.0, 1.0, -80.0, 2.0])
    chosen = sample_tokens(logits, 1.0, 1.0, torch.Generator().manual_seed(3))
    assert set(chosen.tolist()) <= set(allowed)
    assert {0, SAMPLE_BLOCK, vocab - 1} <= set(chosen.tolist())
    small = sample_tokens(torch.tensor([[0.0, float("-inf"), 0.0]]).repeat(500, 1), 1.0, 1.0, torch.Generator())
    assert set(small.tolist()) == {0, 2}


def test_top_p_keeps_only_the_nucleus():
    logits = torch.tensor([[3.0, 2.9, -5.0, -5.0], [0.0, 0.0, 0.0, 10.0]]).repeat(50, 1)
    chosen = sample_tokens(logits, 1.0, 0.5, torch.Generator().manual_seed(0))
    assert set(chosen[0::2].tolist()) == {0} and set(chosen[1::2].tolist()) == {3}
    wide = sample_tokens(logits, 1.0, 0.99, torch.Generator().manual_seed(0))
    assert set(wide[0::2].tolist()) == {0, 1}


def test_sampling_follows_the_softmax_of_the_logits():
    logits = torch.tensor([[0.1, 0.2, 0.7, 0.0]]).log().repeat(20_000, 1)
    chosen = sample_tokens(logits, 1.0, 1.0, torch.Generator().manual_seed(1))
    frequencies = torch.bincount(chosen, minlength=4).double() / len(chosen)
    assert torch.allclose(frequencies, torch.tensor([0.1, 0.2, 0.7, 0.0], dtype=torch.float64), atol=0.015)
    spread = torch.full((1, 3 * SAMPLE_BLOCK), float("-inf"))
    spread[0, ::SAMPLE_BLOCK] = torch.tensor([0.2, 0.3, 0.5]).log()  # one token in each of three blocks
    drawn = sample_tokens(spread.repeat(20_000, 1), 1.0, 1.0, torch.Generator().manual_seed(2))
    assert set(drawn.tolist()) == {0, SAMPLE_BLOCK, 2 * SAMPLE_BLOCK}
    share = torch.bincount(drawn // SAMPLE_BLOCK, minlength=3).double() / len(drawn)
    assert torch.allclose(share, torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64), atol=0.015)
    hot = sample_tokens(logits[:1000], 0.05, 1.0, torch.Generator().manual_seed(1))
    assert set(hot.tolist()) == {2}


def test_prompts_of_one_instruction_share_their_common_prefix_but_never_all_of_a_prompt():
    groups, shared = _shared_prefixes([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4, 6], [7, 8]], ["a", "a", "a", "b"])
    assert groups == [0, 0, 0, 1]
    assert shared == [[1, 2], [7]]
    assert _shared_prefixes([[1, 2, 3]], ["a"]) == ([0], [[1, 2]])


def test_ingest_spans_stay_within_the_token_budget():
    assert _spans([3, 3, 3, 3], 6) == [(0, 2), (2, 4)]
    assert _spans([10, 1], 6) == [(0, 1), (1, 2)]
    assert _spans([1, 1, 1], 100) == [(0, 3)]


def test_settings_take_the_smaller_turn_budget_from_the_config():
    env = EnvConfig(max_turns=3, max_turn_tokens=96, max_obs_tokens=160, max_prompt_length=1024, top_k=3)
    got = RolloutSettings.from_config(env, temperature=0.7, top_p=0.9, max_new_tokens=64)
    assert got == RolloutSettings(3, 64, 160, 1024, 3, 0.7, 0.9)


# -- the weights rollouts read ---------------------------------------------------------------------------------


def test_without_a_dtype_or_in_the_policys_own_dtype_rollouts_read_the_policy_itself(smollm2):
    model, _ = smollm2
    assert RolloutWeights(model, None).current() is model
    assert RolloutWeights(model, torch.float32).current() is model


def assert_copy_of(rollout: torch.nn.Module, policy: torch.nn.Module) -> None:
    """The bfloat16 rollout copy holds the policy's weights, rounded; only the output head, which is the embedding
    too, keeps its plain weight among the packed layers."""
    assert copy_mismatches(rollout, policy) == []
    packed = packed_layers(rollout)
    assert len(freed_weights(rollout)) == (len(packed) - 1 if packed else 0)


def test_a_bfloat16_copy_keeps_ties_leaves_the_policy_alone_and_is_refreshed_only_after_the_policy_changed(smollm2):
    model, _ = smollm2
    policy = copy.deepcopy(model)
    weights = RolloutWeights(policy, torch.bfloat16)
    rollout = weights.current()
    assert rollout is weights.copy and rollout is not policy
    assert {p.dtype for p in rollout.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert rollout.get_input_embeddings().weight is rollout.get_output_embeddings().weight
    assert not any(p.requires_grad for p in rollout.parameters())
    head = rollout.get_output_embeddings()
    version = head.weight._version
    assert weights.current() is rollout and head.weight._version == version  # nothing changed: nothing copied
    with torch.no_grad():
        policy.get_output_embeddings().weight.mul_(1.5)  # what an optimizer step does: an in-place write
    assert not torch.equal(head.weight, policy.get_output_embeddings().weight.to(torch.bfloat16))
    assert weights.current() is rollout
    assert head.weight._version > version
    assert_copy_of(rollout, policy)
    hidden = torch.randn(5, head.weight.shape[1], generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.inference_mode():  # a packed head was repacked too
        assert torch.equal(head(hidden), F.linear(hidden, policy.get_output_embeddings().weight.to(torch.bfloat16)))


def test_a_released_copy_holds_no_storage_and_comes_back_as_a_refresh_would_have_written_it(smollm2):
    model, _ = smollm2
    policy, twin = copy.deepcopy(model), copy.deepcopy(model)
    released, kept = RolloutWeights(policy, torch.bfloat16), RolloutWeights(twin, torch.bfloat16)
    rollout = released.current()
    kept.current()
    released.release()
    assert all(p.numel() == 0 for p in rollout.parameters())
    assert all(m.packed is None for m in rollout.modules() if isinstance(m, _PackedLinear))
    for changed in (policy, twin):  # the update the copy was released for
        with torch.no_grad():
            for param in changed.parameters():
                param.mul_(1.25)
    assert released.current() is rollout and kept.current() is kept.copy
    assert rollout.get_input_embeddings().weight is rollout.get_output_embeddings().weight
    assert all(mine.dtype == torch.bfloat16 and not mine.requires_grad for mine in rollout.parameters())
    assert_copy_of(rollout, policy)
    assert_copy_of(kept.copy, twin)
    ids = torch.tensor([list(range(100, 140))])
    with torch.inference_mode():  # the packed layouts were rebuilt too: the same logits as the copy never released
        torch.testing.assert_close(rollout(input_ids=ids).logits, kept.copy(input_ids=ids).logits, atol=0, rtol=0)
    released.release()
    released.release()  # twice is once
    assert released.current() is rollout and all(m.packed is not None for m in packed_layers(rollout).values())
    assert rollout.get_input_embeddings().weight.numel() > 0
    assert RolloutWeights(model, None).release() is None  # rollouts reading the policy: nothing to free


def test_on_a_cpu_with_onednn_bfloat16_the_copys_linear_layers_are_packed_and_compute_the_same(smollm2):
    if not _onednn_bfloat16():
        pytest.skip("this CPU or PyTorch build has no oneDNN bfloat16 kernels")
    model, _ = smollm2
    rollout = RolloutWeights(model, torch.bfloat16).current()
    layers = [m for m in rollout.modules() if isinstance(m, torch.nn.Linear | _PackedLinear)]
    assert layers and all(isinstance(m, _PackedLinear) for m in layers)
    plain = RolloutWeights(model, torch.bfloat16)
    assert plain.copy is not None
    for path, parent in list(plain.copy.named_modules()):  # the same copy with every layer unpacked again
        for name, child in list(parent.named_children()):
            if isinstance(child, _PackedLinear):  # its plain weight is freed: the policy's, rounded
                weight = model.get_parameter(f"{path}.{name}.weight".lstrip(".")).detach().to(torch.bfloat16)
                linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=child.bias is not None)
                linear.weight = torch.nn.Parameter(weight, requires_grad=False)
                linear.bias = child.bias
                setattr(parent, name, linear)
    ids = torch.tensor([list(range(100, 140))])
    with torch.inference_mode():
        torch.testing.assert_close(rollout(input_ids=ids).logits, plain.copy(input_ids=ids).logits, atol=0, rtol=0)


def test_bfloat16_rollouts_are_the_copys_greedy_choices_and_leave_the_policy_as_it_was(smollm2):
    model, tokenizer = smollm2
    engine = RolloutEngine(
        model,
        tokenizer,
        EchoRetriever(),
        settings(max_turns=0, max_turn_tokens=10),
        device=CPU,
        weights_dtype=torch.bfloat16,
    )
    attention = model.config._attn_implementation
    samples = engine.generate([(SEED_INSTRUCTION, q) for q in (PERU, HAMLET)], greedy=True)
    assert model.config._attn_implementation == attention and not model.training
    rollout = engine.weights.current()
    for sample in samples:
        sequence = torch.tensor([sample.prompt_ids + sample.response_ids])
        with torch.inference_mode():
            logits = rollout(input_ids=sequence).logits[0].float()
        start = len(sample.prompt_ids)
        for position, token in enumerate(sample.response_ids):
            row = logits[start + position - 1]
            assert row[token] >= row.max() - 0.5, position  # bfloat16 kernels round differently (steps of 1/8 at 16)


# -- where the instruction goes ----------------------------------------------------------------------------------


def test_by_default_the_instruction_opens_the_user_turn_right_before_the_question(smollm2):
    model, tokenizer = smollm2
    engine = RolloutEngine(model, tokenizer, EchoRetriever(), settings(), device=CPU)
    text = tokenizer.decode(engine.prompt_ids("Use the tags.", PERU))
    assert "system" not in text.split("Use the tags.")[0].split("<|im_start|>")[-1]
    assert f"<|im_start|>user\nUse the tags.\nQuestion: {PERU.text}\n" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_system_placement_puts_the_instruction_in_the_system_message_and_the_question_alone(smollm2):
    model, tokenizer = smollm2
    engine = RolloutEngine(model, tokenizer, EchoRetriever(), settings(placement="system"), device=CPU)
    text = tokenizer.decode(engine.prompt_ids("Use the tags.", PERU))
    assert "<|im_start|>system\nUse the tags.<|im_end|>" in text
    assert f"<|im_start|>user\n{PERU.text}<|im_end|>" in text


def test_the_placement_comes_from_the_run_config():
    env = EnvConfig(instruction_placement="system")
    assert RolloutSettings.from_config(env, temperature=1.0, top_p=1.0, max_new_tokens=8).placement == "system"
    assert RolloutSettings.from_config(EnvConfig(), temperature=1.0, top_p=1.0, max_new_tokens=8).placement == "user"


def test_a_response_prefix_opens_every_reply_is_read_with_the_prompt_and_never_trained(smollm2):
    model, tokenizer = smollm2
    plain = RolloutEngine(model, tokenizer, EchoRetriever(), settings(max_turns=0, max_turn_tokens=6), device=CPU)
    engine = RolloutEngine(
        model,
        tokenizer,
        EchoRetriever(),
        settings(max_turns=0, max_turn_tokens=6, response_prefix="<think>"),
        device=CPU,
    )
    prompt = engine.prompt_ids(SEED_INSTRUCTION, PERU)
    assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n<think>")
    assert prompt[: len(plain.prompt_ids(SEED_INSTRUCTION, PERU))] == plain.prompt_ids(SEED_INSTRUCTION, PERU)
    (sample,) = engine.generate([(SEED_INSTRUCTION, PERU)], generator=torch.Generator().manual_seed(0))
    assert sample.prompt_ids == prompt
    assert sample.response_text.startswith("<think>")
    assert sample.response_text == "<think>" + tokenizer.decode(sample.response_ids, skip_special_tokens=True)
    assert len(sample.response_mask) == len(sample.response_ids)  # the prefix is prompt, not a trained token


def test_a_tag_the_response_prefix_opens_is_closed_by_the_model_and_read_as_the_first_action(smollm2):
    """The prefix is the start of the first turn: a search it opens and the model closes is a search, run once."""
    model, tokenizer = smollm2
    retriever = EchoRetriever()
    engine = ScriptedEngine(
        model,
        tokenizer,
        retriever,
        settings(max_turns=1, response_prefix="<think> I will look it up. </think>\n<search>"),
        device=CPU,
        scripts={0: encode(tokenizer, " capital of Peru </search>") + encode(tokenizer, "<answer> Lima </answer>")},
    )
    (sample,) = engine.generate([(SEED_INSTRUCTION, PERU)], greedy=True)
    assert retriever.calls == [["capital of Peru"]]
    assert (sample.tool_calls, sample.answer, sample.turns) == (1, "Lima", 2)
    assert sample.response_text.startswith("<think> I will look it up. </think>\n<search> capital of Peru </search>")
    assert "<information>Doc 1(Title: Title 0) Echo 0 of capital of Peru." in sample.response_text
    assert INVALID_ACTION_NOTE not in sample.response_text


def test_the_final_turn_prefix_opens_the_answer_turn_after_the_last_search_and_is_never_trained(smollm2):
    """With one search allowed, the environment writes '<answer>' after its passages: the model's words and its
    closing tag complete the answer, which the rollout reads and the reward sees in a well-formed response."""
    model, tokenizer = smollm2
    engine = ScriptedEngine(
        model,
        tokenizer,
        EchoRetriever(),
        settings(max_turns=1, response_prefix="<think> look </think>\n<search>", final_turn_prefix="<answer>"),
        device=CPU,
        scripts={0: encode(tokenizer, " capital of Peru </search>") + encode(tokenizer, " Lima </answer>")},
    )
    (sample,) = engine.generate([(SEED_INSTRUCTION, PERU)], greedy=True)
    assert (sample.tool_calls, sample.answer, sample.turns) == (1, "Lima", 2)
    assert sample.response_text.endswith("</information>\n\n<answer> Lima </answer>")
    assert is_valid_format(sample.response_text)
    prefix = encode(tokenizer, "<answer>")
    start = len(sample.response_ids) - len(encode(tokenizer, " Lima </answer>")) - len(prefix)
    assert sample.response_ids[start : start + len(prefix)] == prefix
    assert sample.response_mask[start : start + len(prefix)] == [0] * len(prefix)
    assert sample.response_mask[start + len(prefix) :] == [1] * (len(sample.response_ids) - start - len(prefix))


def test_the_final_turn_prefix_waits_for_the_last_search_allowed_and_follows_an_invalid_turn_too(smollm2):
    model, tokenizer = smollm2
    engine = ScriptedEngine(
        model,
        tokenizer,
        EchoRetriever(),
        settings(max_turns=2, final_turn_prefix="<answer>"),
        device=CPU,
        scripts={
            0: encode(tokenizer, "<search> Peru </search>")
            + encode(tokenizer, "no tags here")
            + [tokenizer.eos_token_id]
            + encode(tokenizer, " Lima </answer>")
        },
    )
    (sample,) = engine.generate([(SEED_INSTRUCTION, PERU)], greedy=True)
    assert (sample.tool_calls, sample.answer, sample.turns) == (1, "Lima", 3)
    assert sample.response_text.count("<answer>") == 1
    assert sample.response_text.endswith(f"{INVALID_ACTION_NOTE}<answer> Lima </answer>")


def test_the_response_prefix_comes_from_the_run_config():
    env = EnvConfig(response_prefix="<think>")
    assert RolloutSettings.from_config(env, temperature=1.0, top_p=1.0, max_new_tokens=8).response_prefix == "<think>"
    env = EnvConfig(final_turn_prefix="<answer>")
    opened = RolloutSettings.from_config(env, temperature=1.0, top_p=1.0, max_new_tokens=8)
    assert opened.final_turn_prefix == "<answer>"


def test_a_rollout_whose_last_turn_is_cut_at_the_token_budget_is_marked_truncated(smollm2):
    """DAPO's overlong filtering (`grpo.drop_truncated`) reads this mark: a reply cut in its last turn is
    truncated; one cut in an earlier turn that then answers, or one that answers at once, is not."""
    model, tokenizer = smollm2
    ramble = encode(tokenizer, RAMBLE * 4)
    assert len(ramble) >= 60
    answer = encode(tokenizer, "<answer> 4 </answer>")
    scripts = {0: ramble[:60], 1: ramble[:30] + answer, 2: answer}
    engine = ScriptedEngine(model, tokenizer, EchoRetriever(), settings(max_turns=1), device=CPU, scripts=scripts)
    cut, recovered, answered = engine.generate([(SEED_INSTRUCTION, SUM)] * 3, greedy=True)
    assert (cut.turns, cut.answer, cut.truncated) == (2, None, True)
    assert (recovered.turns, recovered.answer, recovered.truncated) == (2, "4", False)
    assert (answered.turns, answered.truncated) == (1, False)


def _tiny_lora(rank: int = 4) -> Any:
    """A 2-layer random Llama with LoRA adapters whose B is not zero (so the adapters change the logits)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0)
    policy = get_peft_model(LlamaForCausalLM(config), lora)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    return policy


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_lora_policy_rolls_out_on_its_merged_weights_refreshed_after_each_update(dtype):
    policy = _tiny_lora()
    weights = RolloutWeights(policy, dtype)
    merged = weights.current()
    assert merged is not policy and not any("lora_" in name for name, _ in merged.named_parameters())
    ids = torch.randint(0, 97, (2, 9))
    tolerance = {"atol": 1e-5, "rtol": 1e-5} if dtype is None else {"atol": 0.08, "rtol": 0.05}

    def same_logits() -> None:
        with torch.no_grad():
            expected = policy(input_ids=ids).logits
            torch.testing.assert_close(weights.current()(input_ids=ids).logits.float(), expected, **tolerance)

    same_logits()
    with torch.no_grad():  # an optimizer step on the adapters
        for name, param in policy.named_parameters():
            if "lora_" in name:
                param.add_(torch.randn_like(param) * 0.1)
    same_logits()  # refreshed: W + ΔW of the new adapters
    weights.release()
    same_logits()  # rebuilt after a release, the same way
