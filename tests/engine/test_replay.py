"""Replay buffer: failure-first sampling from the latest step, D_B draws, capacity, state."""

import random

from inspo_engine.replay import ReplayBuffer
from inspo_engine.types import Question, Trajectory


def traj(ins, qid, reward):
    return Trajectory(
        instruction_id=ins, question=Question(qid, f"question {qid}", ("gold",)), response="r", reward=reward
    )


def test_failures_come_from_the_latest_step_and_the_lowest_rewards_first():
    buffer = ReplayBuffer(100)
    buffer.add(1, [traj("a", "q1", 0.0), traj("a", "q2", 0.0)])
    buffer.add(2, [traj("a", "q3", 1.0), traj("a", "q4", 0.5), traj("a", "q5", 0.0)])
    picked = buffer.failures(random.Random(0), 2, instruction_id="a")
    assert [t.question.id for t in picked] == ["q5", "q4"]


def test_failures_prefer_the_parents_own_trajectories():
    buffer = ReplayBuffer(100)
    buffer.add(3, [traj("other", "q1", 0.0), traj("parent", "q2", 0.0), traj("parent", "q3", 1.0)])
    picked = buffer.failures(random.Random(0), 1, instruction_id="parent")
    assert picked[0].question.id == "q2"


def test_failures_before_successes_even_from_older_steps():
    buffer = ReplayBuffer(100)
    buffer.add(1, [traj("a", "old-failure", 0.0)])
    buffer.add(2, [traj("a", "new-success", 1.0)])
    picked = buffer.failures(random.Random(0), 2, instruction_id="a")
    assert [t.question.id for t in picked] == ["old-failure", "new-success"]


def test_ties_are_broken_by_the_rng():
    buffer = ReplayBuffer(100)
    buffer.add(1, [traj("a", f"q{i}", 0.0) for i in range(20)])
    one = [t.question.id for t in buffer.failures(random.Random(1), 4)]
    two = [t.question.id for t in buffer.failures(random.Random(2), 4)]
    assert one != two
    assert one == [t.question.id for t in buffer.failures(random.Random(1), 4)]


def test_the_verification_set_holds_distinct_questions():
    buffer = ReplayBuffer(100)
    buffer.add(1, [traj("a", f"q{i % 5}", 0.0) for i in range(20)])
    chosen = buffer.verification_set(random.Random(0), 10)
    assert sorted(q.id for q in chosen) == [f"q{i}" for i in range(5)]


def test_capacity_drops_the_oldest():
    buffer = ReplayBuffer(3)
    buffer.add(1, [traj("a", "q1", 0.0)])
    buffer.add(2, [traj("a", "q2", 0.0), traj("a", "q3", 0.0), traj("a", "q4", 0.0)])
    assert len(buffer) == 3
    assert "q1" not in {q.id for q in buffer.verification_set(random.Random(0), 10)}


def test_stored_trajectories_drop_the_backends_payload_and_round_trip():
    buffer = ReplayBuffer(10)
    item = traj("a", "q1", 0.0)
    item.payload = object()
    buffer.add(1, [item])
    again = ReplayBuffer(10)
    again.load_state(buffer.to_state())
    assert again.failures(random.Random(0), 1)[0] == item
    assert item.payload is None
