"""The run pictures: Fig. 2's panels and the population's weights, drawn from a real run's events."""

import pytest

from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import JsonlSink, read_events
from inspo_engine.optimizers.rules import RuleBasedClient
from inspo_engine.plots import FIG2_FILE, POPULATION_FILE, plot_run, run_series

from .fakes import ScriptedBackend, questions

CONFIG = {
    "seed": 2,
    "grpo": {"total_steps": 12, "group_size": 4, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
    "population": {"population_size": 4, "prune_every": 4},
    "evolution": {"evolve_every": 6, "evolve_until": 6, "verify_samples": 8, "n_candidates": 3},
    "optimizer": {"provider": "rules"},
}


@pytest.fixture
def run_dir(tmp_path):
    config = RunConfig.from_dict(CONFIG)
    sink = JsonlSink(tmp_path / "events.jsonl")
    loop = CoEvolution(
        config, backend=ScriptedBackend(2), train_questions=questions(32), optimizer=RuleBasedClient(), sink=sink
    )
    loop.run()
    sink.close()
    return tmp_path


@pytest.mark.slow
def test_the_series_hold_one_value_per_step_and_each_members_weights(run_dir):
    series = run_series(read_events(run_dir / "events.jsonl"))
    assert series.steps == list(range(1, 13))
    assert len(series.reward) == len(series.answered) == len(series.em) == 12
    assert all(0.0 <= r <= 1.0 for r in series.reward)
    assert "ins-0000" in series.weights
    assert len(series.weights) > 4  # evolution added members, each with its own line


@pytest.mark.slow
def test_plot_run_writes_two_pngs_into_the_run_directory(run_dir):
    written = plot_run(run_dir, title="scripted")
    assert written == [run_dir / FIG2_FILE, run_dir / POPULATION_FILE]
    for path in written:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_run_without_steps_is_refused(tmp_path):
    (tmp_path / "events.jsonl").write_text("")
    with pytest.raises(ValueError, match="no completed step"):
        plot_run(tmp_path)
