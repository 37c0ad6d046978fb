"""The Search-R1 agent loop, driven the way verl's agent-loop worker drives it, against a fake server manager that
generates with a tiny random model and a real /retrieve server: masks, stops, turn limits, truncation, the injected
instruction, and token ids kept as the server returned them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.engine.verl._support import require_verl

require_verl()

from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from inspo_engine.backends.verl.agent_loop import AGENT_NAME, SearchR1AgentLoop  # noqa: E402
from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.overrides import verl_overrides  # noqa: E402
from inspo_engine.env.protocol import INVALID_ACTION_NOTE  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402
from tests.engine.verl.fakes import TinyModelServer  # noqa: E402

INSTRUCTION = "Use the search tags to look things up, then answer inside the answer tags."
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def loop_config(url: str, *, max_turns: int = 3, turn_tokens: int = 32, obs_tokens: int = 96) -> Any:
    config = preset("smoke").with_overrides(
        {
            "env.max_turns": max_turns,
            "env.max_turn_tokens": turn_tokens,
            "backend.max_new_tokens": turn_tokens,
            "env.max_obs_tokens": obs_tokens,
        }
    )
    return compose([*verl_overrides(config), f"+inspo.retriever_url='{url}'"])


def make_loop(config: Any, server: TinyModelServer, tokenizer: Any) -> SearchR1AgentLoop:
    return SearchR1AgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="llama",
    )


def row(question: str = "What is the capital of Peru?", answers: tuple[str, ...] = ("Lima",)) -> dict[str, Any]:
    """One row as verl's agent-loop worker passes it: the trainer already put the instruction in front."""
    return {
        "raw_prompt": [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": question}],
        "reward_model": {"style": "rule", "ground_truth": {"target": list(answers)}},
        "extra_info": {"index": 0},
        "priority": 3,
    }


def run(loop: SearchR1AgentLoop, **kwargs: Any) -> Any:
    return asyncio.run(loop.run(dict(SAMPLING), **(row() | kwargs)))


def spans(mask: list[int]) -> list[tuple[int, int]]:
    """(value, length) runs of the mask."""
    out: list[tuple[int, int]] = []
    for value in mask:
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + 1)
        else:
            out.append((value, 1))
    return out


def test_it_is_registered_for_verl_workers_under_its_name() -> None:
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "inspo_engine.backends.verl.agent_loop.SearchR1AgentLoop"}


def test_a_search_then_an_answer_masks_the_passages_and_scores_exact_match(
    retrieval_server, tiny_model, tokenizer
) -> None:
    url, retriever = retrieval_server
    server = TinyModelServer(
        tiny_model, tokenizer, ["<think>need it</think><search> capital of Peru </search>", "<answer> Lima </answer>"]
    )
    out = run(make_loop(loop_config(url), server, tokenizer))

    assert retriever.queries == ["capital of Peru"]
    assert out.reward_score == 1.0 and out.extra_fields["inspo_answer"] == "Lima"
    assert out.extra_fields["inspo_em"] == out.extra_fields["inspo_f1"] == 1.0
    assert out.extra_fields["inspo_tool_calls"] == 1 and out.extra_fields["inspo_turns"] == 2
    first, second = server.outputs
    assert spans(out.response_mask) == [(1, len(first)), (0, spans(out.response_mask)[1][1]), (1, len(second))]
    observation = out.response_ids[len(first) : len(out.response_ids) - len(second)]
    text = tokenizer.decode(observation)
    assert text.startswith("\n\n<information>Doc 1(Title: Title 0) Echo of capital of Peru.")
    assert text.endswith("</information>\n\n")
    # the second turn saw everything so far, as ids
    assert server.calls[1]["prompt_ids"] == out.prompt_ids + first + observation
    assert len(out.response_logprobs) == len(out.response_ids)
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 0)


@pytest.mark.parametrize(
    ("script", "reward"),
    [
        (["<think>known</think><answer> Lima </answer>"], 0.8),
        (["<think>need it</think><search> capital of Peru </search>", "<think>so</think><answer> Lima </answer>"], 1.0),
    ],
)
def test_the_format_aware_reward_pays_the_protocol_only_to_a_rollout_that_searched(
    script, reward, retrieval_server, tiny_model, tokenizer
) -> None:
    url, _ = retrieval_server
    config = preset("smoke").with_overrides(
        {"env.reward": "em_format", "env.format_score": 0.2, "env.format_requires_search": True}
    )
    loop = make_loop(
        compose([*verl_overrides(config), f"+inspo.retriever_url='{url}'"]),
        TinyModelServer(tiny_model, tokenizer, script),
        tokenizer,
    )
    assert loop.limits.format_requires_search
    out = run(loop)
    assert out.extra_fields["inspo_answer"] == "Lima"
    assert out.reward_score == pytest.approx(reward)


def test_every_turn_asks_the_server_to_stop_at_the_closing_tags_within_the_turn_budget(
    retrieval_server, tiny_model, tokenizer
) -> None:
    url, _ = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["<search> a </search>", "<answer> b </answer>"])
    run(make_loop(loop_config(url, turn_tokens=32), server, tokenizer))
    for call in server.calls:
        assert call["stop"] == ["</search>", "</answer>"] and call["include_stop_str_in_output"] is True
        assert call["max_tokens"] == 32 and call["temperature"] == 1.0
    assert server.calls[0]["request_id"] == server.calls[1]["request_id"]  # sticky: one session per rollout


def test_the_instruction_is_the_system_message_of_the_prompt(retrieval_server, tiny_model, tokenizer) -> None:
    url, _ = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["<answer> Lima </answer>"])
    out = run(make_loop(loop_config(url), server, tokenizer))
    messages = row()["raw_prompt"]
    expected = tokenizer.encode(
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    assert out.prompt_ids == expected == server.calls[0]["prompt_ids"]
    assert INSTRUCTION in tokenizer.decode(out.prompt_ids) and out.response_mask == [1] * len(out.response_ids)


def test_the_final_turn_after_max_turns_ends_the_rollout_whatever_it_asked(
    retrieval_server, tiny_model, tokenizer
) -> None:
    url, retriever = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["<search> one </search>", "<search> two </search>", "x"])
    out = run(make_loop(loop_config(url, max_turns=1), server, tokenizer))
    assert len(server.calls) == 2 and retriever.queries == ["one"]
    assert out.reward_score == 0.0 and out.extra_fields["inspo_answer"] is None
    assert out.response_mask[-len(server.outputs[-1]) :] == [1] * len(server.outputs[-1])  # nothing after the last turn


def test_a_turn_without_an_action_gets_the_note_masked_out(retrieval_server, tiny_model, tokenizer) -> None:
    url, retriever = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["I think it is Lima.</answer", "<answer> Lima </answer>"])
    out = run(make_loop(loop_config(url, turn_tokens=12), server, tokenizer))
    first = server.outputs[0]
    note = tokenizer.encode(INVALID_ACTION_NOTE, add_special_tokens=False)
    assert retriever.queries == []
    assert out.response_ids[len(first) : len(first) + len(note)] == note
    assert out.response_mask[len(first) : len(first) + len(note)] == [0] * len(note)
    assert out.reward_score == 1.0


def test_token_ids_stay_as_the_server_returned_them(retrieval_server, tiny_model, tokenizer) -> None:
    """The random model writes token sequences that decode → encode would not give back; they are kept as is."""
    url, _ = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, seed=3)
    out = run(make_loop(loop_config(url, max_turns=3, turn_tokens=16), server, tokenizer))
    model_tokens = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert model_tokens == [t for turn in server.outputs for t in turn]
    assert all(len(turn) <= 16 for turn in server.outputs)
    reencoded = [tokenizer.encode(tokenizer.decode(turn), add_special_tokens=False) for turn in server.outputs]
    assert reencoded != server.outputs  # so the check above could have failed


def test_long_passages_are_cut_keeping_the_closing_tag(retrieval_server, tiny_model, tokenizer) -> None:
    url, _ = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["<search> everything </search>", "<answer> x </answer>"])
    out = run(make_loop(loop_config(url, obs_tokens=40), server, tokenizer))
    observation = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0]
    assert len(observation) == 40 and tokenizer.decode(observation).endswith("</information>\n\n")


def test_the_response_budget_truncates_the_rollout_with_an_error(retrieval_server, tiny_model, tokenizer) -> None:
    url, _ = retrieval_server
    config = loop_config(url, max_turns=6, turn_tokens=16, obs_tokens=64)
    config.actor_rollout_ref.rollout.response_length = 100
    server = TinyModelServer(tiny_model, tokenizer, ["<search> everything </search>"] * 6)
    out = run(make_loop(config, server, tokenizer))
    assert len(out.response_ids) <= 100 and out.reward_score == 0.0
    assert "response budget" in out.extra_fields["inspo_error"]
    assert sum(call["max_tokens"] for call in server.calls) <= 100


def test_a_prompt_longer_than_prompt_length_scores_zero_without_generating(
    retrieval_server, tiny_model, tokenizer
) -> None:
    url, _ = retrieval_server
    config = loop_config(url)
    config.actor_rollout_ref.rollout.prompt_length = 20
    server = TinyModelServer(tiny_model, tokenizer)
    out = run(make_loop(config, server, tokenizer))
    assert server.calls == [] and out.response_ids == [] and len(out.prompt_ids) == 20
    assert out.reward_score == 0.0 and "prompt_length" in out.extra_fields["inspo_error"]


@pytest.mark.parametrize("answers", [("Lima",), ("lima, peru", "Lima")])
def test_gold_answers_may_come_as_any_sequence(answers, retrieval_server, tiny_model, tokenizer) -> None:
    import numpy as np

    url, _ = retrieval_server
    server = TinyModelServer(tiny_model, tokenizer, ["<answer> Lima </answer>"])
    reward_model = {"ground_truth": {"target": np.array(answers, dtype=object)}}
    out = run(make_loop(loop_config(url), server, tokenizer), reward_model=reward_model)
    assert out.reward_score == 1.0


def test_a_fresh_process_that_imports_verl_gets_the_loop_through_the_installed_entry_point() -> None:
    """What a Ray worker does: import verl, which loads the `verl.plugins` entry points, then look the name up."""
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry as r\n"
        f"print(r[{AGENT_NAME!r}]['_target_'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "inspo_engine.backends.verl.agent_loop.SearchR1AgentLoop"
