"""Population diversity: the pairwise measures, distinct strategies and sampling entropy, the real MiniLM embeddings
the dense retriever uses, and the collapse alarm as a run raises it — after K consecutive steps, once, and at the
same step after a resume."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.checkpoints import latest_checkpoint
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import SEED_INSTRUCTION, RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.diversity import (
    CollapseMonitor,
    DiversityTracker,
    minilm_embed,
    pairwise_cosines,
    sampling_entropy,
    strategy_count,
)
from inspo_engine.env import retrievers
from inspo_engine.events import ListSink, PopulationChanged, PopulationCollapsed, PopulationDiversity

from .fakes import ScriptedBackend, questions

PIRATE = "You are a pirate. Reply to every question in pirate speech, with a joke about the sea."
ONE_WORD = "Reply with a single word and nothing else; never explain."
NEAR_COPIES = [SEED_INSTRUCTION, SEED_INSTRUCTION + " Be brief.", SEED_INSTRUCTION + " Be precise."]

vectors = st.lists(
    st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=3).filter(
        lambda v: any(abs(x) > 1e-3 for x in v)
    ),
    min_size=0,
    max_size=8,
)


@given(vectors, st.floats(0.01, 1.0))
def test_cosines_are_bounded_and_strategies_lie_between_one_and_the_population(points, threshold):
    cosines = pairwise_cosines(points)
    assert len(cosines) == len(points) * (len(points) - 1) // 2
    assert all(-1 - 1e-9 <= c <= 1 + 1e-9 for c in cosines)
    count = strategy_count(points, threshold)
    assert (count == 0) if not points else (1 <= count <= len(points))
    assert strategy_count(points, 1.0 + 1e-6) == len(points)


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=30).filter(lambda ps: sum(ps) > 0))
def test_normalised_entropy_is_one_for_uniform_sampling_and_within_zero_and_one_otherwise(weights):
    probabilities = [w / sum(weights) for w in weights]
    entropy, normalised = sampling_entropy(probabilities)
    assert normalised is not None and 0.0 <= normalised <= 1.0
    assert entropy <= math.log(len(probabilities)) + 1e-9
    assert sampling_entropy([1 / len(weights)] * len(weights))[1] == pytest.approx(1.0)


def test_the_alarm_needs_k_consecutive_steps_and_a_healthy_record_resets_the_count():
    monitor = CollapseMonitor(steps=3)
    verdicts = [(1, ["cosine"]), (2, ["cosine"]), (3, []), (4, ["entropy"]), (4, ["entropy"]), (5, ["cosine"])]
    assert [monitor.observe(step, reasons) for step, reasons in verdicts] == [None] * 6
    assert monitor.observe(6, ["cosine"]) == "collapsed" and monitor.collapsed_since == 4
    assert monitor.observe(7, ["cosine"]) is None, "it trips once, not at every collapsed step"
    again = CollapseMonitor(steps=3)
    again.load_state(monitor.to_state())
    assert again.observe(8, []) == "recovered" and again.collapsed_since is None


@pytest.mark.weights
def test_minilm_puts_near_copies_of_the_seed_closer_than_unrelated_instructions():
    embedded = minilm_embed([*NEAR_COPIES, PIRATE, ONE_WORD])
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in embedded)
    copies, others = embedded[:3], embedded[3:]
    assert min(pairwise_cosines(copies)) > 0.95
    assert max(pairwise_cosines([copy, other])[0] for copy in copies for other in others) < 0.5
    assert strategy_count(embedded, 0.9) == 3, "the three copies are one strategy; the pirate and one-word are two"


@pytest.mark.weights
def test_the_embeddings_come_from_the_dense_retrievers_loaded_model():
    minilm_embed(["load it once"])
    loaded = retrievers._encoder.cache_info().currsize
    path = str(retrievers.default_model_path())
    assert retrievers._encoder(path, None) is retrievers._encoder(path, None)
    minilm_embed(["and again, with nothing new to load"])
    assert retrievers._encoder.cache_info().currsize == loaded


@pytest.mark.weights
def test_a_tracker_embeds_each_text_once():
    calls = []

    def counting(texts):
        calls.append(list(texts))
        return minilm_embed(texts)

    tracker = DiversityTracker(
        strategy_cosine=0.9, collapse_cosine=0.95, collapse_entropy=0.05, collapse_steps=2, embed=counting
    )
    tracker.observe(0, "initialised", [SEED_INSTRUCTION, PIRATE], [0.5, 0.5])
    tracker.observe(1, "step", [SEED_INSTRUCTION, PIRATE], [0.7, 0.3])
    tracker.observe(2, "evolved", [SEED_INSTRUCTION, ONE_WORD], [0.5, 0.5])
    assert calls == [[SEED_INSTRUCTION, PIRATE], [ONE_WORD]]


# -- in a run --------------------------------------------------------------------------------------------------


def config_with(instructions, **population):
    return RunConfig.from_dict(
        {
            "seed": 4,
            "grpo": {"total_steps": 6, "group_size": 2, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
            "population": {
                "population_size": 3,
                "initial_instructions": instructions,
                "paraphrase_init": False,
                "prune": False,
                "collapse_steps": 3,
                **population,
            },
            "evolution": {"enabled": False, "evolve_until": 6},
            "checkpoint": {"checkpoint_every": 2},
        }
    )


def run_loop(config, sink, **kwargs):
    loop = CoEvolution(
        config, backend=ScriptedBackend(seed=1), train_questions=questions(32), optimizer=None, sink=sink, **kwargs
    )
    return loop, loop.run()


@pytest.mark.weights
def test_every_population_record_is_followed_by_its_diversity():
    sink = ListSink()
    run_loop(config_with([PIRATE, ONE_WORD]), sink)
    records = [(e.step, e.reason) for e in sink.of(PopulationChanged)]
    measured = sink.of(PopulationDiversity)
    assert [(e.step, e.reason) for e in measured] == records
    kinds = [e.kind for e in sink.events if e.kind.startswith("population_")]
    assert kinds[:2] == ["population_changed", "population_diversity"]
    first = measured[0]
    assert first.size == 3 and first.strategies == 3 and first.cosine_max < 0.95
    assert 0 < first.jaccard_mean < 1 and first.entropy_normalised == pytest.approx(1.0)
    assert not sink.of(PopulationCollapsed)


@pytest.mark.weights
def test_near_copies_trip_the_alarm_after_k_steps_once():
    sink = ListSink()
    run_loop(config_with(NEAR_COPIES[1:]), sink)
    (alarm,) = sink.of(PopulationCollapsed)
    assert (alarm.since_step, alarm.step, alarm.steps) == (0, 2, 3)
    assert "cosine" in alarm.reasons and alarm.cosine_min >= 0.95 and alarm.collapse_cosine == 0.95


@pytest.mark.weights
def test_sampling_that_settles_on_one_instruction_trips_the_entropy_alarm():
    good = SEED_INSTRUCTION + " Always search before answering, check the passages and use the exact name."
    config = config_with([PIRATE, good], temperature=0.02, collapse_cosine=0.999)
    sink = ListSink()
    run_loop(config, sink)
    (alarm,) = sink.of(PopulationCollapsed)
    assert alarm.reasons == ["entropy"] and alarm.entropy_normalised <= 0.05


@pytest.mark.weights
def test_a_resumed_run_trips_the_alarm_where_an_uninterrupted_one_does(tmp_path):
    config = config_with(NEAR_COPIES[1:], collapse_steps=4)
    straight = ListSink()
    run_loop(config, straight, out_dir=tmp_path / "a")
    first = ListSink()
    done = []
    run_loop(config, first, out_dir=tmp_path / "b", should_stop=lambda: done.append(1) or len(done) >= 2)
    assert not first.of(PopulationCollapsed)
    second = ListSink()
    loop = CoEvolution(
        config, backend=ScriptedBackend(seed=1), train_questions=questions(32), optimizer=None, sink=second
    )
    loop.out_dir = tmp_path / "b"
    loop.load_checkpoint(latest_checkpoint(tmp_path / "b"))
    loop.run()
    assert (
        [(e.since_step, e.step) for e in second.of(PopulationCollapsed)]
        == [(e.since_step, e.step) for e in straight.of(PopulationCollapsed)]
        == [(0, 3)]
    )


@pytest.mark.slow
def test_diversity_off_measures_nothing():
    sink = ListSink()
    run_loop(config_with(NEAR_COPIES[1:], diversity=False), sink)
    assert not sink.of(PopulationDiversity) and not sink.of(PopulationCollapsed)


def test_the_thresholds_are_bounded_like_every_other_field():
    with pytest.raises(ConfigError) as refused:
        config_with([], collapse_cosine=1.5, collapse_entropy=-0.1, collapse_steps=0)
    assert [str(e) for e in refused.value.errors] == [
        "population.collapse_cosine: must be > 0 and ≤ 1, got 1.5",
        "population.collapse_entropy: must be ≥ 0 and ≤ 1, got -0.1",
        "population.collapse_steps: must be ≥ 1 and ≤ 1000000, got 0",
    ]
