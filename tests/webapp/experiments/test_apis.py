"""The experiments API: a submission becomes ordinary runs carrying experiment, arm and seed; a 400 names the bad
field; runs beyond the team's quota wait as pending and start as slots free; cancel stops every run; the table
covers the seeds that finished and names the missing ones; bob's team never sees alice's experiments; viewers
read only."""

from __future__ import annotations

import pytest

from tests.factories import RunFactory
from tests.webapp.experiments.conftest import finish, spec
from webapp.experiments.models import Experiment
from webapp.runs import lifecycle
from webapp.runs.lifecycle import Attempt, run_claim, run_settle
from webapp.runs.models import Run

URL = "/api/v1/experiments/"


def create(client, **changes):
    return client.post(URL, {"name": "exp", **spec(**changes)}, format="json")


def test_an_experiment_becomes_one_ordinary_run_per_arm_and_seed(alice, alice_team, api, enqueued, committed):
    with committed(execute=True):
        response = create(api(alice), seeds=[3, 7])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["arms"] == {"static": {"mode": "static"}, "inspo": {"mode": "online"}} and body["seeds"] == [3, 7]
    runs = Run.objects.filter(experiment_id=body["id"])
    assert sorted((r.arm, r.seed, r.config["seed"], r.config["mode"]) for r in runs) == [
        ("inspo", 3, 3, "online"),
        ("inspo", 7, 7, "online"),
        ("static", 3, 3, "static"),
        ("static", 7, 7, "static"),
    ]
    assert all(r.team == alice_team and r.status == Run.Status.QUEUED for r in runs)
    assert len(enqueued) == 4


def test_a_custom_arm_is_any_set_of_overrides_and_trains_with_them(alice, api):
    response = create(api(alice), arms={"static": None, "slow": {"grpo.lr": 1e-7}}, seeds=1)
    assert response.status_code == 201, response.json()
    slow = Run.objects.get(arm="slow")
    assert slow.config["grpo"]["lr"] == 1e-7 and slow.config["mode"] == "online"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"seeds": 0}, "seeds"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"arms": ["static", "nonsense"]}, "arms.nonsense"),
        ({"arms": {"static": None, "mine": {"grpo.lr": -1}}}, "arms.mine.grpo.lr"),
        ({"overrides": {"grpo.lr": "fast"}}, "overrides.grpo.lr"),
        ({"overrides": {"seed": 4}}, "overrides.seed"),
        ({"baseline": "inspo-2"}, "baseline"),
        ({"evaluation": {"size": "all"}}, "evaluation.size"),
        ({"overrides": {"env.dataset": "/etc/passwd"}}, "overrides.env.dataset"),
        ({"arms": {"static": None, "outside": {"env.corpus": "../../elsewhere.jsonl"}}}, "arms.outside.env.corpus"),
        ({"seeds": 30, "arms": ["static", "inspo"]}, "seeds"),
        ({"evaluation": {"split": "../teams/2/private/test"}}, "evaluation.split"),
        ({"evaluation": {"split": "test/../../x"}}, "evaluation.split"),
        ({"arms": {"static": None, "nl\n": {"grpo.lr": 1e-7}}}, "arms.nl\n"),
        ({"evaluation": {"benchmarks": "builtin"}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": ["builtin", "builtin"]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": ["builtin", "/etc/passwd"]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmark": "/etc/passwd"}}, "evaluation.benchmark"),
        ({"evaluation": {"benchmark": "builtin", "benchmarks": ["builtin"]}}, "evaluation.benchmarks"),
    ],
)
def test_a_bad_experiment_is_a_400_naming_the_field_and_starts_nothing(alice, api, changes, field):
    response = create(api(alice), **changes)
    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_a_body_that_is_not_an_experiment_is_a_400_not_a_crash(alice, api):
    client = api(alice)
    for body in ({"name": "x"}, {"name": "x", "preset": "smoke", "arms": "static", "seeds": "two"}, []):
        response = client.post(URL, body, format="json")
        assert response.status_code == 400, response.content
    assert client.post(URL, {"name": "x", **spec(arms=["static\x00"])}, format="json").status_code == 400


def test_runs_beyond_the_quota_wait_as_pending_and_start_as_slots_free(
    alice, alice_team, api, settings, enqueued, committed
):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 3
    RunFactory(team=alice_team, status=Run.Status.RUNNING)
    with committed(execute=True):
        response = create(api(alice))
    assert response.status_code == 201, response.json()  # no 429: the runs wait
    runs = Run.objects.filter(experiment_id=response.json()["id"]).order_by("created_at")
    assert [r.status for r in runs] == ["queued", "queued", "pending", "pending"]
    assert [r.seed for r in runs if r.status == "queued"] == [0, 0]  # whole seeds first
    assert len(enqueued) == 2

    first = run_claim(run_id=runs[0].pk, worker="w")
    with committed(execute=True):
        assert first is not None and run_settle(first, status=Run.Status.FINISHED)
    assert [r.status for r in runs.all()] == ["finished", "queued", "queued", "pending"]
    assert [args for _, args, _ in enqueued][-1] == [str(runs[2].pk)]

    second = run_claim(run_id=runs[1].pk, worker="w")
    with committed(execute=True):
        assert second is not None and second.give_up("out of memory")  # a failure frees its slot too
    assert [r.status for r in runs.all()] == ["finished", "failed", "queued", "queued"]
    assert len(enqueued) == 4


def test_pending_runs_are_bounded_and_an_experiment_past_the_bound_is_refused_whole(
    alice, alice_team, api, settings, enqueued, committed
):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 2
    settings.INSPO_TEAM_MAX_PENDING_RUNS = 5
    client = api(alice)
    with committed(execute=True):
        first = create(client, arms=["static", "inspo"], seeds=3)  # 6 runs: 2 queued, 4 pending
    assert first.status_code == 201, first.json()
    assert Run.objects.filter(status=Run.Status.PENDING).count() == 4
    second = create(client, arms=["static", "inspo"], seeds=1)  # 2 more would wait: 6 > 5
    assert second.status_code == 400, second.json()
    message = second.json()["seeds"][0]
    assert "may have 5 runs waiting" in message and "1 is left" in message and "would add 2" in message
    assert Experiment.objects.count() == 1 and Run.objects.count() == 6  # nothing of the refused one kept
    third = create(client, arms=["static"], seeds=1)  # one more fits exactly
    assert third.status_code == 201, third.json()
    assert Run.objects.filter(status=Run.Status.PENDING).count() == 5


@pytest.mark.slow
def test_two_experiments_of_16_arms_by_3_seeds_do_not_queue_96_runs(alice, api, settings, committed):
    """The audit's probe, at its sizes and the default bound (64)."""
    assert settings.INSPO_TEAM_MAX_PENDING_RUNS == 64
    arms = {f"a{i}": {"grpo.lr": 1e-6 * (i + 1)} for i in range(16)}
    client = api(alice)
    with committed(execute=True):
        assert create(client, arms=arms, seeds=3, baseline="a0").status_code == 201  # 4 queued, 44 pending
    response = create(client, arms=arms, seeds=3, baseline="a0")
    assert response.status_code == 400 and "20 are left" in response.json()["seeds"][0]
    assert Run.objects.count() == 48


def test_the_sweep_starts_pending_runs_a_missed_hook_left_waiting(alice, alice_team, settings, enqueued, committed):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 1
    RunFactory(team=alice_team, status=Run.Status.RUNNING)
    waiting = RunFactory(team=alice_team, status=Run.Status.PENDING)
    assert lifecycle.sweep()["runs_started"] == 0
    Run.objects.filter(status=Run.Status.RUNNING).update(status=Run.Status.FINISHED)  # ended without the hook
    with committed(execute=True):
        assert lifecycle.sweep()["runs_started"] == 1
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.QUEUED and [args for _, args, _ in enqueued] == [[str(waiting.pk)]]


def test_a_single_run_submission_still_gets_a_429_at_the_quota(alice, alice_team, api, settings):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 1
    RunFactory(team=alice_team, status=Run.Status.RUNNING)
    response = api(alice).post("/api/v1/runs/", {"name": "one", "preset": "smoke"}, format="json")
    assert response.status_code == 429


def test_cancel_stops_every_run_of_the_experiment_and_starts_no_pending_one(alice, alice_team, api, settings, enqueued):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 2
    body = create(api(alice)).json()
    runs = Run.objects.filter(experiment_id=body["id"]).order_by("created_at")
    attempt = run_claim(run_id=runs[0].pk, worker="w")
    assert attempt is not None
    response = api(alice).post(f"{URL}{body['id']}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert [r.status for r in runs.all()] == ["cancelling", "cancelled", "cancelled", "cancelled"]
    assert run_settle(attempt, status=Run.Status.CANCELLED)
    detail = api(alice).get(f"{URL}{body['id']}/").json()
    assert detail["state"] == "cancelled" and detail["counts"] == {"cancelled": 4}


def test_the_table_covers_the_seeds_that_finished_and_names_the_missing_ones(alice, api, experiment):
    runs = {(r.arm, r.seed): r for r in experiment.runs.all()}
    finish(runs[("static", 0)], correct=2)
    finish(runs[("inspo", 0)], correct=4)
    finish(runs[("static", 1)], correct=3)
    Run.objects.filter(pk=runs[("inspo", 1)].pk).update(status=Run.Status.FAILED, error="out of memory")
    body = api(alice).get(f"{URL}{experiment.pk}/").json()
    assert body["state"] == "finished"
    results = body["results"]
    assert results["missing"] == [{"arm": "inspo", "seed": 1}] and not results["complete"]
    assert [row["arm"] for row in results["arms"]] == ["static", "inspo"]  # the experiment's order
    arms = {row["arm"]: row for row in results["arms"]}
    assert arms["static"]["seeds"] == [0, 1] and arms["static"]["mean_em"] == pytest.approx((2 / 8 + 3 / 8) / 2)
    assert arms["inspo"]["seeds"] == [0] and arms["inspo"]["mean_em"] == pytest.approx(4 / 8)
    comparison = arms["inspo"]["comparison"]
    assert comparison["seeds"] == 1 and comparison["mean"] == pytest.approx(2 / 8)  # paired on seed 0 only
    assert arms["inspo"]["verdict"].startswith("inspo − static")
    assert arms["static"]["reward_curve"]["steps"] == [1, 2, 3, 4]


def test_the_reward_curve_counts_a_seed_waiting_to_resume_only_up_to_its_checkpoint(alice, api, experiment):
    """#54 item 6: mid-experiment, a failed seed queued again from its checkpoint of step 2 has reached step 2, not
    the steps its lost attempt recorded after it (its resumed attempt discards them when it starts)."""
    from tests.factories import CheckpointFactory, StepMetricFactory

    runs = {(r.arm, r.seed): r for r in experiment.runs.all()}
    finish(runs[("static", 0)], correct=2)
    resumed = runs[("static", 1)]
    for step in (1, 2, 3):
        StepMetricFactory(run=resumed, step=step, reward_mean=0.5)
    checkpoint = CheckpointFactory(run=resumed, step=2)
    Run.objects.filter(pk=resumed.pk).update(status=Run.Status.QUEUED, step=3, resume_checkpoint=checkpoint)
    arms = {row["arm"]: row for row in api(alice).get(f"{URL}{experiment.pk}/").json()["results"]["arms"]}
    curve = arms["static"]["reward_curve"]
    assert curve["steps"] == [1, 2, 3, 4] and curve["seeds"] == [2, 2, 1, 1]
    assert arms["static"]["seeds"] == [0]  # the seeds that finished


def test_several_benchmarks_give_a_verdict_each_and_one_over_their_unweighted_average(alice, api, nq_file):
    response = create(api(alice), evaluation={"benchmarks": ["builtin", "nq.jsonl"], "size": 8})
    assert response.status_code == 201, response.json()
    assert response.json()["evaluation"]["benchmarks"] == ["builtin", "nq.jsonl"]
    runs = {(r.arm, r.seed): r for r in Run.objects.filter(experiment_id=response.json()["id"])}
    [stored] = {r.config["eval"]["benchmarks"][1] for r in runs.values()}  # the file, resolved in the team's data
    assert stored.endswith("/nq.jsonl") and {r.config["eval"]["benchmarks"][0] for r in runs.values()} == {"builtin"}
    for (arm, seed), run in runs.items():  # inspo 2 of 8 questions ahead on builtin, level with static on nq
        finish(run, correct={"builtin": 2 + seed + 2 * (arm == "inspo"), stored: 6})
    results = api(alice).get(f"{URL}{response.json()['id']}/").json()["results"]
    assert results["benchmarks"] == ["builtin", "nq.jsonl"] and results["complete"]
    inspo = next(row for row in results["arms"] if row["arm"] == "inspo")
    per = {entry["benchmark"]: entry for entry in inspo["benchmarks"]}
    assert per["builtin"]["comparison"]["mean"] == pytest.approx(2 / 8)
    assert per["builtin"]["verdict"].startswith("inspo − static on builtin: +25.0 EM points")
    assert per["nq.jsonl"]["mean_em"] == pytest.approx(0.75) and per["nq.jsonl"]["comparison"]["mean"] == 0.0
    assert inspo["comparison"]["mean"] == pytest.approx(1 / 8)  # (2/8 + 0) / 2: each benchmark weighs ½
    assert inspo["comparison"]["benchmark_questions"] == {"builtin": 8, "nq.jsonl": 8}
    assert inspo["verdict"].startswith("inspo − static on Avg. of 2 benchmarks (each weighted 1/2): +12.5 EM points")


def test_an_experiment_stored_with_one_benchmark_reads_as_before(alice, api, experiment):
    Experiment.objects.filter(pk=experiment.pk).update(
        evaluation={"benchmark": "builtin", "split": "test", "size": 0, "sample_seed": 0}
    )
    for run in experiment.runs.all():
        finish(run, correct=2 + run.seed + 2 * (run.arm == "inspo"))
    body = api(alice).get(f"{URL}{experiment.pk}/").json()
    assert body["experiment"]["evaluation"]["benchmarks"] == ["builtin"]
    inspo = next(row for row in body["results"]["arms"] if row["arm"] == "inspo")
    assert inspo["verdict"].startswith("inspo − static: +25.0 EM points")
    assert [entry["benchmark"] for entry in inspo["benchmarks"]] == ["builtin"]


def test_a_running_experiment_is_running_with_empty_verdicts(alice, api, experiment):
    body = api(alice).get(f"{URL}{experiment.pk}/").json()
    assert body["state"] == "running" and body["counts"] == {"queued": 4}
    assert {row["mean_em"] for row in body["results"]["arms"]} == {None}
    assert len(body["results"]["missing"]) == 4


def test_the_list_shows_the_callers_teams_experiments_only(alice, bob, api, experiment):
    assert [e["id"] for e in api(alice).get(URL).json()["results"]] == [experiment.pk]
    assert api(bob).get(URL).json()["results"] == []


def test_bob_gets_404_for_alices_experiment_on_every_endpoint(bob, api, experiment):
    client = api(bob)
    assert client.get(f"{URL}{experiment.pk}/").status_code == 404
    assert client.post(f"{URL}{experiment.pk}/cancel/").status_code == 404
    assert experiment.runs.filter(status=Run.Status.QUEUED).count() == 4


def test_bob_cannot_start_an_experiment_in_alices_team(bob, api):
    response = create(api(bob), team="alices")
    assert response.status_code == 400 and "team" in response.json()
    assert not Experiment.objects.exists()


def test_a_viewer_reads_but_cannot_start_or_cancel(victor, api, experiment):
    client = api(victor)
    assert client.get(f"{URL}{experiment.pk}/").status_code == 200
    assert create(client).status_code == 403
    assert client.post(f"{URL}{experiment.pk}/cancel/").status_code == 403
    assert Experiment.objects.count() == 1 and experiment.runs.filter(status=Run.Status.QUEUED).count() == 4


def test_a_member_may_start_and_cancel(mia, api):
    client = api(mia)
    body = create(client).json()
    assert client.post(f"{URL}{body['id']}/cancel/").status_code == 200


def test_an_attempt_that_lost_its_run_starts_nothing(alice, alice_team, settings, enqueued, experiment):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 4
    stale = Attempt(run_id=experiment.runs.first().pk, number=7, worker="gone")
    assert not run_settle(stale, status=Run.Status.FINISHED)


def test_a_pending_run_cancelled_by_itself_is_cancelled_at_once(alice, alice_team, api, settings):
    settings.INSPO_TEAM_MAX_ACTIVE_RUNS = 1
    body = create(api(alice)).json()
    pending = Run.objects.filter(experiment_id=body["id"], status=Run.Status.PENDING).first()
    assert pending is not None and pending.is_active
    response = api(alice).post(f"/api/v1/runs/{pending.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
