"""Population arithmetic: moving-average weights, softmax sampling, successive halving, lineage, state."""

import itertools
import math
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.population import Population, softmax


def make(size=7, n_parents=1, temperature=0.2, window=5, count=None):
    population = Population(max_size=size, n_parents=n_parents, temperature=temperature, weight_window=window)
    for i in range(size if count is None else count):
        population.add(f"instruction {i}", origin="seed" if i == 0 else "paraphrase", step=0)
    return population


@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=20),
    st.floats(0.01, 10.0),
)
def test_softmax_is_a_distribution_ordered_like_the_weights(weights, temperature):
    probs = softmax(weights, temperature)
    assert math.isclose(sum(probs), 1.0, rel_tol=1e-9)
    assert all(0.0 <= p <= 1.0 for p in probs)
    pairs = list(zip(weights, probs, strict=True))
    for (w1, p1), (w2, p2) in itertools.pairwise(pairs):
        if w1 > w2:
            assert p1 >= p2


def test_softmax_at_the_papers_temperature_matches_the_formula():
    probs = softmax([0.4, 0.2], 0.2)
    expected = math.exp(2.0) / (math.exp(2.0) + math.exp(1.0))
    assert probs[0] == pytest.approx(expected)


def test_the_weight_is_the_mean_over_the_last_window_of_steps_it_was_used():
    population = make(count=2)
    first = population.members[0]
    for step, reward in enumerate([0.0, 1.0, 1.0, 0.5, 0.5, 0.0, 1.0], start=1):
        population.record_step(step, {first.id: [reward]})
    assert first.weight(5) == pytest.approx((1.0 + 0.5 + 0.5 + 0.0 + 1.0) / 5)
    assert population.members[1].weight(5) == 0.0


def test_a_steps_reward_is_the_mean_over_the_groups_the_instruction_was_used_for():
    population = make(count=1)
    only = population.members[0]
    population.record_step(1, {only.id: [1.0, 0.0, 0.5]})
    assert only.rewards == [(1, 0.5)]
    assert only.samples == 3


def test_steps_where_an_instruction_was_not_sampled_do_not_count():
    population = make(count=2)
    a, b = population.members
    population.record_step(1, {a.id: [1.0]})
    population.record_step(2, {b.id: [0.0]})
    population.record_step(3, {b.id: [0.0]})
    assert a.weight(5) == 1.0


@given(st.integers(1, 7), st.integers(1, 7))
def test_pruning_drops_the_bottom_half_but_never_below_n_parents(size, n_parents):
    population = make(size=7, n_parents=n_parents, count=size)
    for i, member in enumerate(population.members):
        population.record_step(1, {member.id: [i / 10]})
    before = population.ranked()
    dropped = population.prune(step=5)
    kept = len(population)
    if size <= n_parents:
        assert dropped == []
    else:
        assert kept == max(n_parents, size - size // 2)
        assert [m.id for m in population.ranked()] == [m.id for m in before[:kept]]
        assert all(d.prune_step == 5 and d.removal_reason == "pruned" for d in dropped)


def test_successive_halving_takes_seven_to_one_in_three_prunes():
    population = make()
    sizes = []
    for step in (5, 10, 15):
        population.prune(step)
        sizes.append(len(population))
    assert sizes == [4, 2, 1]


def test_sampling_follows_the_softmax_probabilities():
    population = make(count=3)
    a, b, c = population.members
    population.record_step(1, {a.id: [0.6], b.id: [0.4], c.id: [0.0]})
    counts = Counter(ins.id for ins in population.sample(random.Random(0), 20_000))
    probs = population.probabilities()
    for member in (a, b, c):
        assert counts[member.id] / 20_000 == pytest.approx(probs[member.id], abs=0.015)


def test_the_same_seed_replays_the_same_samples():
    population = make()
    first = [i.id for i in population.sample(random.Random(7), 50)]
    second = [i.id for i in population.sample(random.Random(7), 50)]
    assert first == second


def test_a_reset_zeroes_the_weight_but_keeps_the_reward_history():
    population = make(count=1)
    only = population.members[0]
    population.record_step(1, {only.id: [1.0]})
    population.reset_weights(step=1)
    assert only.weight(5) == 0.0
    assert only.lifetime_reward() == 1.0
    population.record_step(2, {only.id: [0.5]})
    assert only.weight(5) == 0.5


def test_the_best_is_the_highest_weight_and_the_older_one_on_ties():
    population = make(count=3)
    assert population.best().id == population.members[0].id
    population.record_step(1, {population.members[2].id: [0.3]})
    assert population.best().id == population.members[2].id


def test_ids_are_stable_and_lineage_survives_retirement():
    population = make(count=2)
    parent = population.members[0]
    child = population.add("child", origin="reflection", step=15, parent_id=parent.id)
    population.retire(parent.id, step=20, reason="pruned")
    assert child.id == "ins-0002"
    assert population.get(child.id).parent_id == parent.id
    assert not population.get(parent.id).alive


def test_the_population_refuses_to_overfill_or_empty():
    population = make(size=2, count=2)
    with pytest.raises(ValueError, match="full"):
        population.add("one more", origin="manual", step=0)
    population.retire(population.members[0].id, step=1, reason="pruned")
    with pytest.raises(ValueError, match="empty"):
        population.retire(population.members[0].id, step=1, reason="pruned")


def test_state_round_trips():
    population = make()
    population.record_step(1, {population.members[0].id: [1.0, 0.0]})
    population.prune(step=5)
    again = make(count=0)
    again.load_state(population.to_state())
    assert again.snapshot() == population.snapshot()
    assert again.archive == population.archive


# -- how sure the population is of its members' rewards (#45 item 2) --------------------------------------------------


def test_each_member_carries_its_recent_reward_with_a_t_interval_over_the_groups_behind_its_weight():
    from inspo_engine.stats import t_quantile

    population = make(window=3, count=2)
    first, second = (m.id for m in population.members)
    for step, rewards in enumerate(([1.0, 0.0], [1.0], [0.0, 0.0], [1.0, 1.0]), start=1):
        population.record_step(step, {first: rewards, second: [0.5]})
    by_id = {m.id: m for m in population.snapshot()}
    # The window keeps the last 3 steps: [1], [0, 0], [1, 1] — five groups, step means 1, 0 and 1.
    member = by_id[first]
    assert member.recent_reward == pytest.approx(2 / 3) == pytest.approx(member.weight)
    assert member.recent_samples == 5
    values = [1.0, 0.0, 0.0, 1.0, 1.0]
    sd = (sum((v - 0.6) ** 2 for v in values) / 4) ** 0.5
    half = t_quantile(0.975, 4) * sd * (1 / 1 + 1 / 2 + 1 / 2) ** 0.5 / 3
    assert member.recent_low == pytest.approx(2 / 3 - half) and member.recent_high == pytest.approx(2 / 3 + half)
    # The same value at every step leaves no spread: the interval is the point.
    assert by_id[second].recent_low == by_id[second].recent_high == 0.5 and by_id[second].recent_samples == 3


def test_a_member_with_fewer_than_two_groups_has_no_interval_and_a_reset_empties_its_window():
    population = make(count=2)
    first, second = (m.id for m in population.members)
    population.record_step(1, {first: [0.4]})
    by_id = {m.id: m for m in population.snapshot()}
    assert by_id[first].recent_reward == 0.4 and by_id[first].recent_low is None and by_id[first].recent_samples == 1
    assert by_id[second].recent_reward is None and by_id[second].recent_samples == 0
    population.record_step(2, {first: [0.6]})
    population.reset_weights(2)
    assert population.snapshot()[0].recent_samples == 0


def test_the_recent_rewards_survive_a_checkpoint_and_an_older_state_without_them_loads():
    population = make(count=2)
    population.record_step(1, {population.members[0].id: [1.0, 0.0]})
    again = make(count=0)
    again.load_state(population.to_state())
    assert again.snapshot() == population.snapshot() and again.snapshot()[0].recent_samples == 2
    older = population.to_state()
    for data in older["archive"]:
        del data["recent_groups"]
    again.load_state(older)
    assert again.snapshot()[0].recent_samples == 0 and again.snapshot()[0].weight == 0.5
