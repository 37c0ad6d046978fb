"""The run page lists what the run's config changed from its preset, from the run's `preset_diff` in the API."""

from __future__ import annotations

import pytest

from inspo_engine.presets import preset
from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import RunFactory
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_the_run_page_shows_the_configs_changes_from_its_preset(browser, live_server, alice, alice_team):
    changed = preset("smoke").with_overrides({"grpo.lr": 2e-6, "mode": "static"}).to_dict()
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke", config=changed)
    unchanged = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke")

    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    changes = page.get_by_test_id("config-vs-preset")
    changes.locator("tbody tr").first.wait_for()
    rows = [row.inner_text().split("\t") for row in changes.locator("tbody tr").all()]
    assert [row[0] for row in rows] == ["grpo.lr", "mode"]  # field, the preset's value, this run's
    assert rows[0][2] == "0.000002" and float(rows[0][1]) == preset("smoke").grpo.lr
    assert rows[1] == ["mode", "online", "static"]
    pages.assert_no_errors("the run page")

    pages.goto(f"/runs/{unchanged.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    assert "the “smoke” preset unchanged" in page.get_by_test_id("config-vs-preset").inner_text()
    pages.assert_no_errors("the run page of an unchanged run")


def _recorded(alice, alice_team, *, with_parts):
    """A finished quick-shaped run: six steps, the untrained and the final evaluation on 32 questions (none right),
    a population of two, and a sampled trajectory that opens with the preset's text. Without parts: as recorded
    before per-step parts and recent rewards were kept."""
    from tests.factories import (
        EvaluationFactory,
        InstructionFactory,
        PopulationMemberFactory,
        PopulationSnapshotFactory,
        StepMetricFactory,
        TrajectoryFactory,
    )
    from webapp.runs.models import EvaluationAnswer

    config = preset("quick").to_dict()
    run = RunFactory(
        team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="quick", config=config, total_steps=6
    )
    seed, other = (
        InstructionFactory(run=run, key=k, origin=o) for k, o in (("ins-0000", "seed"), ("ins-0001", "manual"))
    )
    Run.objects.filter(pk=run.pk).update(best_instruction=seed, step=6)
    for step, formed in enumerate([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], start=1):
        parts = {"reward_format": 0.2 * formed, "reward_correct": 0.0} if with_parts else {}
        metrics = {"em": 0.0, "well_formed": formed, **parts} if with_parts else {}
        StepMetricFactory(run=run, step=step, reward_mean=0.2 * formed, tool_calls_mean=formed, metrics=metrics)
        snapshot = PopulationSnapshotFactory(run=run, step=step, reason="step", best=seed)
        for instruction, weight in ((seed, 0.18), (other, 0.15)):
            recent = {"recent_reward": weight, "recent_low": weight - 0.1, "recent_high": weight + 0.1}
            PopulationMemberFactory(
                snapshot=snapshot,
                instruction=instruction,
                weight=weight,
                **({**recent, "recent_samples": step} if with_parts else {}),
            )
    for step in (0, 6):
        evaluation = EvaluationFactory(run=run, step=step, value=0.0, n=32, instruction=seed)
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=0.0, f1=0.0) for i in range(32)
        )
    opening = config["env"]["response_prefix"]
    TrajectoryFactory(
        run=run,
        step=6,
        instruction=seed,
        reward=0.2,
        answer="I must find",
        golden_answers=["Lima"],
        response=f"{opening} capital of Peru </search><information>Lima is the capital.</information>"
        "<answer> I must find </answer>",
    )
    return run


@pytest.mark.django_db(transaction=True)
def test_a_finished_runs_page_says_what_it_learnt_and_how_sure_its_population_is(
    browser, live_server, alice, alice_team
):
    run = _recorded(alice, alice_team, with_parts=True)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    learnt = page.get_by_test_id("run-learnt")
    verdict = learnt.get_by_test_id("learnt-verdict").inner_text()
    assert "This run taught the format only" in verdict
    assert "did not change on these 32 questions" in verdict and "interval" not in verdict  # none can be estimated
    facts = learnt.get_by_test_id("learnt-facts").inner_text()
    assert "0.000 before training" in facts and "0.000 after" in facts and "no interval can be estimated" in facts
    assert "won" not in facts  # the population below cannot tell its two instructions apart
    assert "The best-weighted instruction is ins-0000 (not yet distinguishable from the others)" in facts
    assert "ins-0000 has a recent reward of 0.180 [0.080, 0.280] over 6 questions" in facts
    caption = page.get_by_test_id("reward-caption")
    assert caption.is_visible() and "the reward is format credit only" in caption.inner_text()
    verdict = page.get_by_test_id("population-resolution")
    assert verdict.get_attribute("data-kind") == "none"
    assert "cannot yet tell its instructions apart" in verdict.inner_text()
    assert page.get_by_test_id("member-recent").first.inner_text() == "0.180 [0.080, 0.280]"
    pages.assert_no_errors("the run page")

    pages.goto(f"/runs/{run.pk}/trajectories/")
    page.wait_for_selector("#app[data-ready=true]")
    card = page.get_by_test_id("trajectory-card").first
    card.wait_for()
    given = card.get_by_test_id("segment-given")
    assert given.count() == 1 and "given by the preset" in given.inner_text().lower()  # the label is upper-cased
    assert "format credit" in card.get_by_test_id("trajectory-reward").inner_text()
    pages.assert_no_errors("the trajectory page")


@pytest.mark.django_db(transaction=True)
def test_a_run_recorded_before_the_parts_and_intervals_were_kept_still_renders(browser, live_server, alice, alice_team):
    run = _recorded(alice, alice_team, with_parts=False)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    assert page.get_by_test_id("reward-caption").is_hidden()
    assert page.get_by_test_id("member-recent").first.inner_text() == "—"
    assert page.get_by_test_id("population-resolution").get_attribute("data-kind") == "unknown"
    assert "What this run learnt" in page.get_by_test_id("run-learnt").inner_text()
    pages.assert_no_errors("the run page of an older run")


@pytest.mark.django_db(transaction=True)
def test_a_running_runs_progress_shows_its_evaluations_and_counts_them_in_the_eta(
    browser, live_server, alice, alice_team
):
    """#54 item 4: while the untrained policy is evaluated the page says so, and once steps run its ETA counts the
    final evaluation's questions beside the remaining steps."""
    import time

    from django.utils import timezone

    from tests.factories import StepMetricFactory

    now = time.time()
    run = RunFactory(
        team=alice_team,
        creator=alice,
        preset="quick",
        config=preset("quick").to_dict(),
        status=Run.Status.RUNNING,
        started_at=timezone.now(),
        total_steps=12,
        evaluation_progress={"step": 0, "done": 23, "total": 64, "started": now - 46, "time": now},
    )
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    progress = page.get_by_test_id("run-progress")
    progress.filter(has_text="evaluating the untrained policy: 23 / 64 questions").wait_for()
    assert "ETA —" in progress.inner_text()  # no step has been timed yet

    # The first evaluation took 128 s for 64 questions; three steps of 10 s followed. Left: 9 steps (90 s) and the
    # final evaluation's 64 questions (128 s), 3 min 38 s, which the page rounds to 4 min (the steps alone: 2 min).
    finished = {"step": 0, "done": 64, "total": 64, "started": now - 128, "time": now}
    for step in (1, 2, 3):
        StepMetricFactory(run=run, step=step, timings={"rollout": 7.0, "update": 3.0})
    Run.objects.filter(pk=run.pk).update(
        step=3, evaluation_progress=finished | {"seconds": 128.0, "questions": 64, "evaluations": 1}
    )
    progress.filter(has_text="training step 4 / 12").wait_for(timeout=15_000)
    assert "ETA 4 min" in progress.inner_text(), progress.inner_text()
    pages.assert_no_errors("a running run's page")
