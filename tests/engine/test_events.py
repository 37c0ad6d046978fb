"""Each event field is written once: a population record's diversity event is the `Diversity` measures with the
record's step and reason, and a sampled trajectory is the `Trajectory`'s own record. The JSON on the wire keeps its
keys and their order (docs/events.md; the web app's recorder and stored events.jsonl files read it)."""

from __future__ import annotations

import dataclasses
import json

from inspo_engine import events, types
from inspo_engine.diversity import DiversityTracker
from inspo_engine.events import Diversity, PopulationDiversity, TrajectoriesSampled, event_from_dict
from inspo_engine.types import Question, Trajectory, TrajectoryRecord


def test_a_diversity_event_carries_the_measures_after_the_records_step_and_reason():
    names = [f.name for f in dataclasses.fields(PopulationDiversity)]
    assert names == ["time", "step", "reason", *(f.name for f in dataclasses.fields(Diversity))]
    tracker = DiversityTracker(
        strategy_cosine=0.9,
        collapse_cosine=0.95,
        collapse_entropy=0.05,
        collapse_steps=2,
        embed=lambda texts: [[1.0, 0.0] if "a" in t else [0.0, 1.0] for t in texts],
    )
    event = tracker.observe(3, "step", ["a b", "c d"], [0.5, 0.5])[0]
    wire = json.loads(json.dumps(event.to_dict()))
    assert list(wire) == [
        "kind",
        "time",
        "step",
        "reason",
        "size",
        "cosine_mean",
        "cosine_min",
        "cosine_max",
        "jaccard_mean",
        "strategies",
        "entropy",
        "entropy_normalised",
    ]
    assert wire["kind"] == "population_diversity" and wire["step"] == 3 and wire["size"] == 2
    assert event_from_dict(wire) == event


def test_a_trajectory_is_stored_and_sent_as_its_record():
    trajectory = Trajectory("ins-1", Question("q1", "Who?", ("Ann", "Anne")), "<answer> Ann </answer>", 1.0, "Ann", 1)
    stored = trajectory.to_dict()
    assert list(stored) == [f.name for f in dataclasses.fields(TrajectoryRecord)]
    assert stored["question_id"] == "q1" and stored["golden_answers"] == ["Ann", "Anne"]
    assert Trajectory.from_dict(stored) == trajectory
    assert events.TrajectoryRecord is types.TrajectoryRecord
    sampled = TrajectoriesSampled(step=1, trajectories=[trajectory.record()], time=1.0)
    wire = json.loads(json.dumps(sampled.to_dict()))
    assert wire == {"kind": "trajectories_sampled", "time": 1.0, "step": 1, "trajectories": [stored]}
    assert event_from_dict(wire) == sampled
