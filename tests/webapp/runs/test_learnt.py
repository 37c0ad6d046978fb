"""The run page of a finished run says what the run learnt: exact match before and after training on the same
questions with its interval, the format and searching its rollouts learnt, what the reward was earned for, and
whether an evolved instruction won; that a run which moved only the format taught the format only; what is compared
when the run did not evaluate the untrained policy; and pages of runs recorded before any of this still render
(#45 item 1). The trajectory viewer knows the preset's opening text, and marks each rollout's answer right or not."""

from __future__ import annotations

from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import EvalCompleted, ListSink, StepCompleted
from inspo_engine.stats import compare
from inspo_engine.types import Question
from tests.engine.test_reward_parts import STATIC, FormatAwareBackend
from tests.factories import (
    EvaluationFactory,
    InstructionFactory,
    PopulationMemberFactory,
    PopulationSnapshotFactory,
    RunFactory,
    StepMetricFactory,
    TrajectoryFactory,
)
from webapp.runs.learnt import Correctness, Member, Population, learnt_summary, run_learnt
from webapp.runs.models import EvaluationAnswer, Instruction, Run
from webapp.runs.recorder import DatabaseSink

pytestmark = pytest.mark.django_db


class Both:
    """Every event to the database (as a worker records a run) and to a list the test reads the numbers from."""

    def __init__(self, run_id):
        self.database, self.list = DatabaseSink(run_id), ListSink()

    def emit(self, event):
        self.database.emit(event)
        self.list.emit(event)


def recorded_run(team, overrides):
    """A finished run recorded from the engine's own events: the scripted policy under the em_format reward."""
    steps = {"grpo.total_steps": 6, "evolution.evolve_until": 6}
    config = RunConfig.from_dict(STATIC).with_overrides({**steps, **overrides})
    run = RunFactory(team=team, status=Run.Status.RUNNING, config=config.to_dict(), total_steps=6)
    sink = Both(run.pk)
    held_out = [Question(f"t{i}", f"What is the capital of test country {i}?", (f"City {i}",)) for i in range(24)]
    CoEvolution(
        config,
        backend=FormatAwareBackend(seed=2),
        train_questions=[Question(f"q{i}", f"Capital of {i}?", (f"City {i}",)) for i in range(32)],
        optimizer=None,
        sink=sink,
        eval_sets={"builtin": held_out},
    ).run()
    sink.database.flush()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FINISHED)
    run.refresh_from_db()
    return run, sink.list


def page(user, run, name="runs:detail"):
    client = Client()
    client.force_login(user)
    return unescape(client.get(reverse(name, kwargs={"run_id": run.pk})).content.decode())


def test_the_summary_sets_exact_match_after_training_against_the_untrained_policy_on_the_same_questions(
    alice, alice_team
):
    run, events = recorded_run(alice_team, {"eval.eval_at_start": True})
    before, after = events.of(EvalCompleted)
    assert (before.step, after.step) == (0, 6)
    scores = [{a["question_id"]: a["em"] for a in e.answers} for e in (after, before)]
    expected = compare("after", {0: scores[0]}, "before", {0: scores[1]})

    learnt = run_learnt(run=run)
    (row,) = learnt.correctness
    assert (row.before, row.after, row.questions) == (pytest.approx(before.value), pytest.approx(after.value), 24)
    assert (row.low, row.high) == (pytest.approx(expected.low), pytest.approx(expected.high))
    html = page(alice, run)
    assert 'data-testid="run-learnt"' in html and "What this run learnt" in html
    assert f"{before.value:.3f} before training" in html and f"{after.value:.3f} after" in html
    assert f"[{100 * expected.low:+.1f}".replace("-", "\N{MINUS SIGN}") in html

    steps = events.of(StepCompleted)
    last = steps[-3:]
    form = sum(s.metrics["reward_format"] for s in last) / 3
    correct = sum(s.metrics["reward_correct"] for s in last) / 3
    assert f"{form:.3f} for the form and {correct:.3f} for correct answers" in html
    calls = [s.tool_calls_mean for s in steps]
    assert f"Searches per reply: {sum(calls[:3]) / 3:.2f} over the first steps, {sum(calls[-3:]) / 3:.2f}" in html
    assert "No evolved instruction won: the best, ins-0000, is the seed instruction" in html


def test_a_run_whose_correctness_did_not_move_says_it_taught_the_format_only(alice, alice_team):
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, total_steps=12)
    seed = InstructionFactory(run=run, key="ins-0000", origin="seed")
    Run.objects.filter(pk=run.pk).update(best_instruction=seed)
    for step, formed in enumerate([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], start=1):
        StepMetricFactory(
            run=run,
            step=step,
            reward_mean=0.2 * formed,
            tool_calls_mean=formed,
            metrics={"em": 0.0, "well_formed": formed, "reward_format": 0.2 * formed, "reward_correct": 0.0},
        )
    for step in (0, 12):
        evaluation = EvaluationFactory(run=run, step=step, value=0.0, n=32, instruction=seed)
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=0.0, f1=0.0) for i in range(32)
        )
    html = page(alice, run)
    assert 'data-taught="format"' in html
    assert "This run taught the format only: correctness did not move" in html
    assert "0.000 before training" in html and "no interval can be estimated" in html
    assert "correctness did not move (exact match did not change on these 32 questions)" in html
    assert "within the" not in html
    formed = "Well-formed replies (think, search, answer in the protocol's order): 20 % over the first steps, 80 %"
    assert formed in html
    assert "0.160 for the form and 0.000 for correct answers" in html


def test_without_an_evaluation_before_training_it_says_what_it_compares(alice, alice_team):
    run, events = recorded_run(alice_team, {})
    (after,) = events.of(EvalCompleted)
    learnt = run_learnt(run=run)
    assert learnt.taught == "unknown"
    html = page(alice, run)
    assert "This run did not evaluate the untrained policy, so it cannot say whether correctness moved" in html
    assert f"after training (step 6, instruction ins-0000): {after.value:.3f}, 95 % interval [" in html
    assert "eval.eval_at_start is off" in html


def test_an_evolved_winner_is_named_only_when_the_last_population_tells_it_from_the_others():
    run = RunFactory(status=Run.Status.FINISHED)
    child = InstructionFactory(run=run, key="ins-0004", origin="reflection", birth_step=8)
    seed = InstructionFactory(run=run, key="ins-0000", origin="seed", birth_step=0)
    Run.objects.filter(pk=run.pk).update(best_instruction=child)
    run.refresh_from_db()
    assert (
        "The best-weighted instruction is ins-0004, written by reflection at step 8 (no population was recorded to "
        "compare it with)." in run_learnt(run=run).facts
    )
    snapshot = PopulationSnapshotFactory(run=run, step=12, best=child)
    for instruction, low, high in ((child, 0.5, 0.7), (seed, 0.1, 0.3)):
        PopulationMemberFactory(
            snapshot=snapshot, instruction=instruction, weight=high, recent_reward=(low + high) / 2,
            recent_low=low, recent_high=high, recent_samples=40,
        )  # fmt: skip
    facts = run_learnt(run=run).facts
    assert "An evolved instruction won: the best, ins-0004, was written by reflection at step 8." in facts
    assert (
        "In the last population (after step 12), the best-weighted instruction ins-0004 has a recent reward of 0.600 "
        "[0.500, 0.700] over 40 questions; every other member's 95 % interval lies below it." in facts
    )


ROWS = {
    "unchanged, no interval": dict(before=0.0, after=0.0, difference=0.0, constant=True),
    "unchanged, interval": dict(before=0.25, after=0.25, difference=0.0, low=-0.1, high=0.1),
    "changed, no interval": dict(before=0.0, after=1.0, difference=1.0),
    "changed, interval over 0": dict(before=0.2, after=0.25, difference=0.05, low=-0.05, high=0.15),
    "changed, interval above 0": dict(before=0.1, after=0.3, difference=0.2, low=0.05, high=0.35),
}
"""Exact match before and after on 32 questions: whether any question changed × whether an interval can be
estimated (and where it lies)."""
POPULATIONS = {
    "distinguishable": [("ins-0008", 0.6, 0.5, 0.7), ("ins-0003", 0.2, 0.1, 0.3)],
    "not distinguishable": [("ins-0008", 0.4, 0.1, 0.7), ("ins-0003", 0.3, 0.0, 0.6)],
    "no interval": [("ins-0008", 0.4, None, None), ("ins-0003", 0.3, None, None)],
}
"""The last population: its best-weighted instruction's interval above the other's, overlapping it, or too few
questions for one."""


@pytest.mark.parametrize("population", POPULATIONS)
@pytest.mark.parametrize("correctness", ROWS)
def test_every_sentence_of_the_summary_follows_from_the_numbers_its_facts_show(correctness, population):
    row = Correctness(
        "builtin", 32, after_step=12, after_instruction="ins-0008", **{"before_step": 0, **ROWS[correctness]}
    )
    members = [Member(key, mean, low, high, 5) for key, mean, low, high in POPULATIONS[population]]
    best = Instruction(key="ins-0008", origin="reflection", birth_step=8)
    learnt = learnt_summary(
        correctness=[row], formed=(0.2, 0.8), population=Population(12, members), best=best, total_steps=12
    )
    text = " ".join([learnt.verdict, *learnt.facts])
    facts = " ".join(learnt.facts)

    if row.low is None:  # no interval: none is named, nothing lies "within" it
        assert "no interval can be estimated" in facts and "95 % interval [" not in text
        assert "interval" not in learnt.verdict and "within the 95 % interval" not in text
    else:
        assert "no interval can be estimated" not in text and "95 % interval [" in facts
    if correctness == "unchanged, no interval":
        assert learnt.taught == "format"
        assert "correctness did not move (exact match did not change on these 32 questions)" in learnt.verdict
    elif correctness in ("unchanged, interval", "changed, interval over 0"):
        assert learnt.taught == "format"
        assert "exact match after training is within the 95 % interval of before" in learnt.verdict
    elif correctness == "changed, no interval":
        assert learnt.taught == "correctness"
        assert "rose on every one of the 32 builtin questions alike (+100.0 EM points)" in learnt.verdict
    else:
        assert learnt.taught == "correctness" and "rose beyond its 95 % interval" in learnt.verdict

    if population == "distinguishable":
        assert "An evolved instruction won: the best, ins-0008, was written by reflection at step 8." in facts
        assert "every other member's 95 % interval lies below it" in facts
    else:
        assert "won" not in text
        assert (
            "The best-weighted instruction is ins-0008 (not yet distinguishable from the others), written by "
            "reflection at step 8." in learnt.facts
        )
        said = "overlaps it" if population == "not distinguishable" else "cannot yet tell its instructions apart"
        assert said in facts


def test_runs_recorded_before_and_runs_not_finished_render_without_a_summary(alice, alice_team):
    old = RunFactory(team=alice_team, status=Run.Status.FINISHED)
    StepMetricFactory(run=old, step=1, metrics={"kl": 0.01})  # a step recorded before the parts were kept
    EvaluationFactory(run=old, step=4, value=0.25, n=4)  # an evaluation without per-question answers
    html = page(alice, old)
    assert 'data-testid="run-learnt"' in html and "did not evaluate the untrained policy" in html
    running = RunFactory(team=alice_team, status=Run.Status.RUNNING)
    assert 'data-testid="run-learnt"' not in page(alice, running)
    assert run_learnt(run=running) is None


def test_the_trajectory_page_names_the_presets_opening_and_the_api_says_whether_an_answer_is_right(
    alice, alice_team, api
):
    opening = "<think> I will search for what the question asks about. </think>\n<search>"
    run = RunFactory(team=alice_team, status=Run.Status.FINISHED, config={"env": {"response_prefix": opening}})
    TrajectoryFactory(run=run, step=1, reward=0.2, answer="I must find", golden_answers=["Lima"])
    TrajectoryFactory(run=run, step=1, reward=1.0, answer="lima", golden_answers=["Lima"])
    html = page(alice, run, "runs:trajectories")
    assert 'data-testid="response-prefix-note"' in html and 'data-response-prefix="<think>' in html
    rows = api(alice).get(f"/api/v1/runs/{run.pk}/trajectories/").json()["trajectories"]
    assert [(t["reward"], t["correct"]) for t in rows] == [(0.2, False), (1.0, True)]
