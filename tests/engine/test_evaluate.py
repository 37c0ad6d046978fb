"""The instruction × checkpoint grid on the real SmolLM2-135M: two checkpoints (the model, and the model with its
weights moved), two instructions, the same two questions in every cell; each checkpoint is loaded once, each cell
comes out as soon as it is scored, and a failure keeps the cells before it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch.backend import TorchBackend
from inspo_engine.checkpoints import POLICY_DIR
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.datasets import sample_questions
from inspo_engine.evaluate import answer_scores, evaluate_grid
from inspo_engine.presets import preset

from .torch_backend.conftest import CACHE_DIR, EchoRetriever

pytestmark = pytest.mark.slow

CONFIG = preset("smoke").with_overrides({"backend.max_new_tokens": 8, "env.max_turns": 1, "seed": 3})
INSTRUCTIONS = {
    "ins-0000": CONFIG.population.seed_instruction,
    "ins-0003": "Reply with only <answer> the short answer </answer>.",
}
QUESTIONS = sample_questions(builtin_dataset().test, 2, seed=0)


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """step → policy directory: step 10 is the model as shipped, step 20 the same with every weight moved a little."""
    root = tmp_path_factory.mktemp("checkpoints")
    backend = TorchBackend(CONFIG, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    backend.save(root / "step-000010")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in backend.trainer.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    backend.save(root / "step-000020")
    return {10: root / "step-000010" / POLICY_DIR, 20: root / "step-000020" / POLICY_DIR}


class Loader:
    """Loads a checkpoint's policy as the web app's task does (a TorchBackend on its `policy/`) and counts loads."""

    def __init__(self) -> None:
        self.loaded: list[Path] = []

    def __call__(self, policy_dir: Path) -> TorchBackend:
        self.loaded.append(policy_dir)
        return TorchBackend(CONFIG, retriever=EchoRetriever(), cache_dir=CACHE_DIR, model_path=policy_dir)


def test_every_cell_answers_the_same_questions_with_its_checkpoints_own_policy_and_skips_what_is_done(policies):
    load = Loader()
    cells = list(evaluate_grid(load, policies, INSTRUCTIONS, QUESTIONS))

    assert [(c.instruction_id, c.step) for c in cells] == [
        ("ins-0000", 10),
        ("ins-0003", 10),
        ("ins-0000", 20),
        ("ins-0003", 20),
    ]
    assert load.loaded == [policies[10], policies[20]]  # one load per checkpoint, in step order
    for cell in cells:
        assert [t.question.id for t in cell.trajectories] == [q.id for q in QUESTIONS]
        assert cell.scores == answer_scores(cell.trajectories)
        assert 0.0 <= cell.scores["em"] <= 1.0 and 0.0 <= cell.scores["f1"] <= 1.0
    by_cell = {(c.instruction_id, c.step): [t.response for t in c.trajectories] for c in cells}
    assert by_cell[("ins-0000", 10)] != by_cell[("ins-0000", 20)]  # the two checkpoints' weights differ
    assert by_cell[("ins-0000", 10)] != by_cell[("ins-0003", 10)]  # and so do the instructions

    # A second pass that skips three cells loads only the checkpoint it still needs and answers as the first did.
    again = Loader()
    skip = {("ins-0000", 10), ("ins-0003", 10), ("ins-0000", 20)}
    rest = list(evaluate_grid(again, policies, INSTRUCTIONS, QUESTIONS, skip=skip))
    assert [(c.instruction_id, c.step) for c in rest] == [("ins-0003", 20)]
    assert again.loaded == [policies[20]]
    assert [t.response for t in rest[0].trajectories] == by_cell[("ins-0003", 20)]  # greedy: the same answers


def test_a_checkpoint_that_fails_to_load_ends_the_grid_after_the_cells_before_it(policies, tmp_path):
    broken = {10: policies[10], 30: tmp_path / "step-000030" / POLICY_DIR}  # never written
    grid = evaluate_grid(Loader(), broken, INSTRUCTIONS, QUESTIONS, skip={("ins-0000", 10)})
    assert [(c.instruction_id, c.step) for c in [next(grid)]] == [("ins-0003", 10)]
    with pytest.raises(OSError):
        next(grid)


def test_a_sample_is_the_same_for_the_same_seed_and_size_and_keeps_the_benchmarks_order():
    test = builtin_dataset().test
    first, again = sample_questions(test, 20, seed=7), sample_questions(test, 20, seed=7)
    assert [q.id for q in first] == [q.id for q in again] and len(first) == 20
    order = {q.id: i for i, q in enumerate(test)}
    assert [order[q.id] for q in first] == sorted(order[q.id] for q in first)
    assert [q.id for q in sample_questions(test, 20, seed=8)] != [q.id for q in first]
    assert sample_questions(test, len(test) + 5, seed=7) == list(test)
