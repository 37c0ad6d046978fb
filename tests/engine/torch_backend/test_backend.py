"""TorchBackend on the real SmolLM2-135M: rollouts with rewards and masks, a GRPO update, greedy scoring, resume."""

import pytest
import torch

from inspo_engine.backends.torch.backend import TorchBackend
from inspo_engine.backends.torch.precision import native_bfloat16
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.presets import preset
from inspo_engine.types import RolloutRequest

from .conftest import CACHE_DIR, EchoRetriever, copy_mismatches

pytestmark = pytest.mark.slow

CONFIG = preset("smoke").with_overrides({"backend.max_new_tokens": 12, "env.max_turns": 2, "seed": 7})


@pytest.fixture(scope="module")
def backend():
    return TorchBackend(CONFIG, retriever=EchoRetriever(), cache_dir=CACHE_DIR)


def requests(n=2):
    questions = builtin_dataset().train[:n]
    return [RolloutRequest("ins-0000", CONFIG.population.seed_instruction, q) for q in questions]


def test_the_smoke_preset_computes_in_what_auto_resolves_to_on_this_machine(backend):
    assert CONFIG.backend.precision == "auto"
    native = native_bfloat16(torch.device("cpu"))
    assert backend.computes_in == ("bf16-mixed" if native else "fp32")
    assert backend.trainer.compute_dtype == (torch.bfloat16 if native else None)


def test_rollouts_come_back_in_groups_with_rewards_and_masks(backend):
    groups = backend.rollout(requests(), group_size=2)
    assert [len(g) for g in groups] == [2, 2]
    for group, request in zip(groups, requests(), strict=True):
        for trajectory in group:
            assert trajectory.question == request.question
            assert trajectory.reward in (0.0, 1.0)
            sample = trajectory.payload
            assert len(sample.response_ids) == len(sample.response_mask)
            assert trajectory.response_tokens == sum(sample.response_mask) > 0


def test_an_update_changes_the_policy_and_reports_grpo_metrics(backend):
    before = [p.detach().clone() for p in backend.trainer.model.parameters()][:4]
    groups = backend.rollout(requests(), group_size=2)
    groups[0][0].reward, groups[0][1].reward = 1.0, 0.0
    result = backend.update(groups)
    after = list(backend.trainer.model.parameters())[:4]
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert {"kl", "clip_fraction", "lr", "pg_loss", "grad_norm"} <= set(result.metrics)
    assert {"old_logprobs", "ref_logprobs", "update"} <= set(result.timings)


def test_scoring_is_greedy_and_repeatable(backend):
    questions = builtin_dataset().dev[:3]
    first = backend.score(CONFIG.population.seed_instruction, questions)
    assert len(first) == 3 and all(s in (0.0, 1.0) for s in first)
    assert backend.answer(CONFIG.population.seed_instruction, questions) == backend.answer(
        CONFIG.population.seed_instruction, questions
    )


def test_save_then_load_continues_with_the_same_weights_and_sampling(backend, tmp_path):
    backend.save(tmp_path)
    assert (tmp_path / "policy" / "model.safetensors").exists()
    assert not (tmp_path / "policy" / "trainer_state.pt").exists()
    expected = [[t.response for t in g] for g in backend.rollout(requests(1), group_size=2)]
    again = TorchBackend(CONFIG, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    again.load(tmp_path)
    assert [[t.response for t in g] for g in again.rollout(requests(1), group_size=2)] == expected


def test_dropping_uniform_groups_trains_only_on_groups_whose_rewards_differ():
    config = CONFIG.with_overrides({"grpo.drop_uniform_groups": True})
    backend = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    weights = [p.detach().clone() for p in backend.trainer.model.parameters()]

    def unchanged() -> bool:
        return all(torch.equal(w, p) for w, p in zip(weights, backend.trainer.model.parameters(), strict=True))

    groups = backend.rollout(requests(), group_size=2)
    for group in groups:
        for trajectory in group:
            trajectory.reward = 0.0
    idle = backend.update(groups)
    assert unchanged() and idle.metrics["optimizer_steps"] == 0.0 and backend.trainer.steps_done == 1

    groups[0][0].reward = 1.0
    mixed = backend.update(groups)
    assert not unchanged() and mixed.metrics["optimizer_steps"] == 1.0
    trained = sum(len(t.payload.response_ids) for t in groups[0])
    assert mixed.metrics["response_tokens"] == trained  # the uniform second group was left out


def test_bfloat16_rollouts_read_a_copy_that_follows_every_update():
    backend = TorchBackend(
        CONFIG.with_overrides({"backend.rollout_dtype": "bfloat16"}), retriever=EchoRetriever(), cache_dir=CACHE_DIR
    )
    policy, copy = backend.trainer.model, backend.engine.weights.copy
    assert copy is not None and {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the update trains the float32 weights
    groups = backend.rollout(requests(), group_size=2)
    groups[0][0].reward, groups[0][1].reward = 1.0, 0.0
    backend.update(groups)

    assert all(p.numel() == 0 for p in copy.parameters())  # released for the update, rebuilt by the next rollout
    backend.rollout(requests(1), group_size=1)
    assert copy_mismatches(copy, policy) == []


def test_the_cpu_demo_pays_the_protocol_only_to_rollouts_that_searched():
    """The preset's em_format reaches the backend with format_requires_search: the same correct, well-formed reply
    scores 0.8 from memory and 1 after a search; a searched wrong answer scores the format credit, gold in view
    or not."""
    config = preset("cpu-demo")
    assert config.env.format_requires_search
    backend = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    searched = "<think>x</think><search> Peru </search><information>Doc 1 Lima.</information>"
    replies = ["<think>x</think><answer> Lima </answer>", searched + "<think>y</think><answer> Lima </answer>"]
    assert backend.reward(replies, golden_answers=[["Lima"]] * 2) == [pytest.approx(0.8), 1.0]
    # a wrong answer earns the format credit alone, whether or not the passages showed the gold: with a retrieval
    # credit the demo's policy learned to answer with the entity it searched for ('<answer> Peru </answer>')
    echoed = searched + "<answer> Peru </answer>"
    unseen = "<think>x</think><search> Peru </search><information>Doc 1 Quito.</information><answer> Peru </answer>"
    assert backend.reward([echoed, unseen], golden_answers=[["Lima"]] * 2) == [0.2, 0.2]
