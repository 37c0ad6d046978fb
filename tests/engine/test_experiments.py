"""Experiments: validation that names the field, how an arm's config is composed, and the results table with a seed
missing; the run directories read back are written by the real loop over the scripted policy."""

import json

import pytest

from inspo_engine.coevolution import CoEvolution
from inspo_engine.config_fields import ConfigError
from inspo_engine.events import JsonlSink, Overhead, RunFinished, RunStarted, StepCompleted, read_events
from inspo_engine.experiments import (
    BUILTIN_ARMS,
    EvalSpec,
    Experiment,
    arm_config,
    experiment_from_dict,
    experiment_results,
    read_experiment,
    read_run,
    results_markdown,
    run_name,
)
from inspo_engine.machine import describe, described, peak_rss_kib
from inspo_engine.plots import plot_experiment
from inspo_engine.presets import preset

from .fakes import ScriptedBackend, questions


def fields_of(data) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        experiment_from_dict(data)
    return [error.field for error in raised.value.errors]


# -- validation -----------------------------------------------------------------------------------------------------


def test_a_valid_experiment_takes_built_in_arms_by_name_and_a_seed_count():
    experiment = experiment_from_dict(
        {"preset": "smoke", "arms": ["static", "random-pool"], "seeds": 3, "evaluation": {"size": 20}}
    )
    assert experiment.arms == {"static": BUILTIN_ARMS["static"], "random-pool": BUILTIN_ARMS["random-pool"]}
    assert experiment.seeds == [0, 1, 2]
    assert experiment.evaluation == EvalSpec(size=20)
    assert experiment.runs() == [(arm, seed) for seed in range(3) for arm in ("static", "random-pool")]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"arms": {"static": None, "foo": {"grpo.lr": -1}}}, "arms.foo.grpo.lr"),
        ({"arms": {"static": None, "foo": {"lr": 2}}}, "arms.foo.grpo.lr"),
        ({"arms": {"static": None, "foo": {"no_such_field": 1}}}, "arms.foo.no_such_field"),
        ({"arms": ["static", "mystery"]}, "arms.mystery"),
        ({"arms": {"static": None, "bad name!": {"lr": 1e-6}}}, "arms.bad name!"),
        ({"arms": []}, "arms"),
        ({"seeds": 0}, "seeds"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"seeds": "three"}, "seeds"),
        ({"seeds": 10_000}, "seeds"),
        ({"evaluation": {"size": -3}}, "evaluation.size"),
        ({"evaluation": {"size": "all"}}, "evaluation.size"),
        ({"evaluation": {"sample_seed": -1}}, "evaluation.sample_seed"),
        ({"evaluation": {"benchmark": "${oops}"}}, "evaluation.benchmark"),
        ({"evaluation": {"benchmark": 3}}, "evaluation.benchmark"),
        ({"evaluation": {"benchmarks": ["builtin", "${oops}"]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": "builtin"}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": []}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": ["nq.jsonl", "nq.jsonl"]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": ["builtin", 3]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmarks": [f"b{i}.jsonl" for i in range(17)]}}, "evaluation.benchmarks"),
        ({"evaluation": {"benchmark": "builtin", "benchmarks": ["builtin"]}}, "evaluation.benchmarks"),
        ({"evaluation": {"questions": 3}}, "evaluation.questions"),
        ({"overrides": {"grpo.group_size": 1}}, "overrides.grpo.group_size"),
        ({"overrides": {"seed": 4}}, "overrides.seed"),
        ({"overrides": {"eval.eval_samples": 4}}, "overrides.eval.eval_samples"),
        ({"overrides": "lr=1"}, "overrides"),
        ({"preset": "gigantic"}, "preset"),
        ({"baseline": "inspo", "arms": ["static"]}, "baseline"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_each_invalid_field_is_named(data, field):
    assert field in fields_of({"preset": "smoke", **data})


def test_a_custom_arm_without_overrides_is_refused_and_one_with_them_is_kept():
    assert fields_of({"preset": "smoke", "arms": {"static": None, "mine": {}}}) == ["arms.mine"]
    experiment = experiment_from_dict({"preset": "smoke", "arms": {"static": None, "mine": {"lr": 2e-5}}})
    assert experiment.arms["mine"] == {"lr": 2e-5}


def test_a_built_in_arms_own_overrides_apply_on_top_of_it():
    experiment = experiment_from_dict({"preset": "smoke", "arms": {"static": None, "inspo": {"temperature": 1.0}}})
    assert experiment.arms["inspo"] == {"mode": "online", "temperature": 1.0}


def test_an_experiment_takes_several_benchmarks_and_every_run_is_evaluated_on_all_of_them():
    experiment = experiment_from_dict(
        {"preset": "smoke", "seeds": 2, "evaluation": {"benchmarks": ["builtin", "nq.jsonl"], "size": 5}}
    )
    assert experiment.evaluation == EvalSpec(benchmarks=("builtin", "nq.jsonl"), size=5)
    assert {arm_config(experiment, arm, seed).eval.benchmarks[1] for arm, seed in experiment.runs()} == {"nq.jsonl"}
    assert experiment.to_dict()["evaluation"]["benchmarks"] == ["builtin", "nq.jsonl"]
    assert experiment_from_dict(experiment.to_dict()) == experiment


def test_an_evaluation_stored_with_one_benchmark_loads_as_before():
    stored = {"benchmark": "nq.jsonl", "split": "test", "size": 8, "sample_seed": 0}
    assert EvalSpec.from_dict(stored) == EvalSpec(benchmarks=("nq.jsonl",), size=8)
    assert experiment_from_dict({"preset": "smoke", "evaluation": stored}).evaluation.benchmarks == ("nq.jsonl",)
    assert EvalSpec.from_dict({"split": "dev"}) == EvalSpec(split="dev")


# -- arm configs ----------------------------------------------------------------------------------------------------


def test_an_arms_config_is_the_preset_then_the_overrides_then_the_arm_then_the_seed_and_the_evaluation():
    experiment = Experiment(
        preset="smoke",
        overrides={"lr": 3e-5, "population_size": 4},
        arms={"static": {"mode": "static"}, "fast": {"lr": 9e-5}},
        seeds=[0, 7],
        evaluation=EvalSpec(benchmarks=("builtin",), split="dev", size=12, sample_seed=5),
    )
    base = preset("smoke")
    fast = arm_config(experiment, "fast", 7)
    assert fast.grpo.lr == 9e-5  # the arm's override wins over the experiment's
    assert fast.population.population_size == 4
    assert fast.seed == 7
    assert (fast.eval.benchmarks, fast.eval.split, fast.eval.eval_samples, fast.eval.sample_seed) == (
        ["builtin"],
        "dev",
        12,
        5,
    )
    assert fast.grpo.total_steps == base.grpo.total_steps and fast.mode == base.mode
    static = arm_config(experiment, "static", 0)
    assert static.mode == "static" and static.grpo.lr == 3e-5 and static.seed == 0


def test_the_built_in_arms_set_the_mode_and_no_verify_turns_verification_off():
    experiment = experiment_from_dict({"preset": "smoke", "arms": list(BUILTIN_ARMS), "seeds": 1})
    configs = {arm: arm_config(experiment, arm, 0) for arm in BUILTIN_ARMS}
    assert {arm: c.mode for arm, c in configs.items()} == {
        "static": "static",
        "inspo": "online",
        "no-verify": "online",
        "random-pool": "random-pool",
    }
    assert configs["inspo"].evolution.verify and not configs["no-verify"].evolution.verify


def test_random_pool_draws_its_pool_with_the_keyless_optimizer_when_the_runs_needs_a_key():
    experiment = experiment_from_dict(
        {"preset": "smoke", "overrides": {"optimizer.provider": "gemini"}, "arms": ["static", "inspo", "random-pool"]}
    )
    assert arm_config(experiment, "inspo", 0).optimizer.provider == "gemini"
    assert arm_config(experiment, "random-pool", 0).optimizer.provider == "rules"


def test_an_unknown_arm_is_refused():
    experiment = experiment_from_dict({"preset": "smoke", "arms": ["static"]})
    with pytest.raises(ConfigError, match="unknown arm"):
        arm_config(experiment, "inspo", 0)


# -- results --------------------------------------------------------------------------------------------------------


def scores(rates: dict[int, float], n: int = 40, benchmark: str = "builtin") -> dict[str, dict[int, dict[str, float]]]:
    """On one benchmark, per seed, the first round(rate × n) of n questions right."""
    return {benchmark: {seed: {f"q{i}": float(i < round(rate * n)) for i in range(n)} for seed, rate in rates.items()}}


def three_seed_experiment() -> Experiment:
    return experiment_from_dict({"preset": "smoke", "arms": ["static", "inspo", "random-pool"], "seeds": 3})


def test_results_are_computed_over_the_finished_seeds_and_name_the_missing_runs():
    experiment = three_seed_experiment()
    results = experiment_results(
        experiment,
        {
            "static": scores({0: 0.2, 1: 0.3, 2: 0.25}),
            "inspo": scores({0: 0.4, 2: 0.5}),  # seed 1 failed
            "random-pool": {},
        },
        {"static": {0: [0.1, 0.2], 1: [0.2, 0.3], 2: [0.1, 0.1]}, "inspo": {0: [0.3], 1: [0.0], 2: [0.5]}},
    )
    missing = [(m["arm"], m["seed"]) for m in results["missing"]]
    assert missing == [("random-pool", 0), ("inspo", 1), ("random-pool", 1), ("random-pool", 2)]  # seed by seed
    assert not results["complete"]
    rows = {row["arm"]: row for row in results["arms"]}
    assert rows["static"]["mean_em"] == pytest.approx(0.25) and rows["static"]["verdict"] is None
    inspo = rows["inspo"]
    assert inspo["seeds"] == [0, 2] and inspo["mean_em"] == pytest.approx(0.45)
    assert inspo["comparison"]["seeds"] == 2  # paired on the seeds both arms finished
    assert inspo["comparison"]["mean"] == pytest.approx(((0.4 - 0.2) + (0.5 - 0.25)) / 2)
    assert inspo["verdict"].startswith("inspo − static: +22.5 EM points")
    assert inspo["reward_last"] == pytest.approx((0.3 + 0.5) / 2)  # finished seeds only
    assert inspo["reward_curve"]["seeds"] == [3]  # the curve shows every run that trained
    assert rows["random-pool"]["mean_em"] is None and "no seed finished" in rows["random-pool"]["verdict"]
    json.dumps(results)


def test_the_markdown_table_has_a_row_per_arm_the_verdicts_and_the_missing_runs():
    experiment = three_seed_experiment()
    results = experiment_results(
        experiment,
        {"static": scores({0: 0.2, 1: 0.3, 2: 0.25}), "inspo": scores({0: 0.2, 1: 0.35, 2: 0.2}), "random-pool": {}},
        {},
        f1_by_arm={"static": scores({0: 0.5, 1: 0.5, 2: 0.5})},
    )
    text = results_markdown(results)
    assert "| static | 3 | 0.250 | 0.500 | – | baseline |  |" in text
    assert "| inspo | 3 | 0.250 | – | – | +0.0 [" in text and "no detectable difference |" in text
    assert "Missing runs (no final evaluation yet): random-pool seed 0, random-pool seed 1, random-pool seed 2." in text


def test_a_comparison_without_variance_says_so_in_the_verdict_table_and_seeds_needed():
    experiment = experiment_from_dict({"preset": "smoke", "arms": ["static", "inspo"], "seeds": 2})
    same = scores({0: 0.25, 1: 0.25}, n=8)
    results = experiment_results(experiment, {"static": same, "inspo": same}, {})
    inspo = {row["arm"]: row for row in results["arms"]}["inspo"]
    assert inspo["comparison"]["without_variance"] is True
    assert inspo["comparison"]["seeds_needed"] == {
        "difference": 0.05,
        "seeds": None,
        "reason": "every paired difference was the same, so there is no variance to extrapolate from",
    }
    assert "so the interval cannot be estimated" in inspo["verdict"]
    text = results_markdown(results)
    assert "| inspo | 2 | 0.250 | – | – | +0.0 [+0.0, +0.0] (no variance) | no detectable difference |" in text
    assert "both arms scored every question alike in every seed, so the interval cannot be estimated" in text


@pytest.mark.slow
def test_results_and_pictures_are_read_back_from_run_directories_the_loop_wrote(tmp_path):
    experiment = experiment_from_dict(
        {"preset": "smoke", "arms": ["static", "random-pool"], "seeds": 2, "evaluation": {"size": 8}}
    )
    for arm, seed in experiment.runs()[:-1]:  # the last run never ran
        config = arm_config(experiment, arm, seed).with_overrides({"optimizer.provider": "rules"})
        directory = tmp_path / run_name(arm, seed)
        sink = JsonlSink(directory / "events.jsonl")
        loop = CoEvolution(
            config,
            backend=ScriptedBackend(seed=seed),
            train_questions=questions(32),
            optimizer=None if arm == "static" else _rules(config, tmp_path),
            sink=sink,
            out_dir=directory,
            eval_sets={"builtin": questions(8)},
        )
        loop.run()
        sink.close()
    results = read_experiment(experiment, tmp_path)
    assert results["missing"] == [{"arm": "random-pool", "seed": 1}]
    rows = {row["arm"]: row for row in results["arms"]}
    assert rows["static"]["seeds"] == [0, 1] and rows["static"]["questions"] == 8
    assert rows["random-pool"]["seeds"] == [0]
    assert rows["random-pool"]["comparison"]["seeds"] == 1
    assert rows["static"]["reward_curve"]["steps"] == [1, 2, 3, 4]
    assert 0.0 <= rows["static"]["mean_f1"] <= 1.0
    pictures = plot_experiment(results, tmp_path)
    assert [p.name for p in pictures] == ["reward.png", "em.png"]
    assert all(p.stat().st_size > 5000 for p in pictures)
    started = [e for e in read_events(tmp_path / "static-s0" / "events.jsonl") if isinstance(e, RunStarted)]
    recorded = started[0].machine
    assert started[0].precision == "fp32"  # what the backend computed in
    assert recorded["cpu"] == describe()["cpu"] and recorded["python"] == describe()["python"]
    runs = ["static-s0", "random-pool-s0", "static-s1"]
    assert results["machines"] == [{"machine": recorded, "described": described(recorded), "runs": runs}]
    assert results["machines_warning"] is None
    assert "different machines" not in results_markdown(results)
    costs = {run_name(run["arm"], run["seed"]): run for run in results["runs"]}
    assert set(costs) == {"static-s0", "random-pool-s0", "static-s1"}  # the run that never ran has no cost
    assert all(run["finished"] and run["steps"] == 4 and run["minutes"] >= 0 for run in costs.values())
    assert all(run["precision"] == "fp32" for run in costs.values())  # what ScriptedBackend computes in
    assert all(run["peak_rss_kib"] >= peak_rss_kib() // 2 for run in costs.values())  # this process's, in KiB
    text = results_markdown(results)
    assert "| run | steps | minutes | peak RSS, GB | computed in |" in text and "| static-s0 | 4 | " in text


def test_a_resumed_runs_minutes_leave_out_the_wait_between_its_starts_and_its_peak_is_the_highest_recorded(tmp_path):
    def step(n, at):
        return StepCompleted(
            step=n, total_steps=2, phase="joint", reward_mean=0.5, reward_std=0.0, tool_calls_mean=1.0,
            response_length_mean=10.0, instruction_length_mean=5.0, metrics={}, timings={}, overhead=Overhead(),
            time=at,
        )  # fmt: skip

    def end(status, at, peak):
        return RunFinished(
            step=1, status=status, best_instruction_id="i0", best_instruction="x", overhead=Overhead(),
            peak_rss_kib=peak, time=at,
        )  # fmt: skip

    sink = JsonlSink(tmp_path / "events.jsonl")
    for event in (
        RunStarted(config={}, time=1000.0),
        step(1, 1300.0),
        end("cancelled", 1320.0, 3_000_000),  # 320 s
        RunStarted(config={}, resumed_from_step=1, time=9000.0),  # hours later
        step(2, 9100.0),
        end("finished", 9160.0, 2_500_000),  # 160 s
    ):
        sink.emit(event)
    sink.close()
    outcome = read_run(tmp_path, "builtin")
    assert outcome.minutes == pytest.approx((320 + 160) / 60)
    assert outcome.peak_rss_kib == 3_000_000
    assert not outcome.finished  # its final evaluation file is missing
    assert read_run(tmp_path / "absent", "builtin").minutes is None


def test_runs_that_computed_on_different_machines_are_listed_and_the_table_warns():
    experiment = three_seed_experiment()
    here, there = {"cpu": "AMD EPYC", "cpu_flags": "avx512_bf16"}, {"cpu": "Intel Xeon", "cpu_flags": "amx_bf16"}
    machines = {"static-s0": here, "static-s1": here, "inspo-s0": there, "inspo-s1": None}
    results = experiment_results(experiment, {"static": scores({0: 0.2, 1: 0.3})}, {}, machines=machines)
    assert results["machines"] == [
        {"machine": here, "described": "cpu AMD EPYC, cpu_flags avx512_bf16", "runs": ["static-s0", "static-s1"]},
        {"machine": there, "described": "cpu Intel Xeon, cpu_flags amx_bf16", "runs": ["inspo-s0"]},
        {"machine": None, "described": "not recorded", "runs": ["inspo-s1"]},
    ]
    assert results["machines_warning"].startswith("The runs computed on 3 different machines. Arms are paired by seed")
    text = results_markdown(results)
    assert "**The runs computed on 3 different machines.**" in text
    assert "- cpu AMD EPYC, cpu_flags avx512_bf16: static-s0, static-s1" in text
    assert "- cpu Intel Xeon, cpu_flags amx_bf16: inspo-s0" in text and "- not recorded: inspo-s1" in text
    assert json.loads(json.dumps(results)) == results  # results.json holds it as it is


def two_benchmark_experiment() -> Experiment:
    return experiment_from_dict(
        {"preset": "smoke", "arms": ["static", "inspo"], "seeds": 3, "evaluation": {"benchmarks": ["nq", "hotpotqa"]}}
    )


def two_benchmark_results():
    """inspo 20 points ahead on nq (40 questions), level on hotpotqa (200), and seed 2's hotpotqa missing."""
    static = scores({0: 0.2, 1: 0.3, 2: 0.25}, benchmark="nq") | scores({0: 0.5, 1: 0.5, 2: 0.5}, 200, "hotpotqa")
    inspo = scores({0: 0.4, 1: 0.5, 2: 0.45}, benchmark="nq") | scores({0: 0.5, 1: 0.5}, 200, "hotpotqa")
    return experiment_results(two_benchmark_experiment(), {"static": static, "inspo": inspo}, {})


def test_several_benchmarks_give_a_verdict_each_and_one_over_their_unweighted_average():
    results = two_benchmark_results()
    assert results["benchmarks"] == ["nq", "hotpotqa"]
    assert results["missing"] == [{"arm": "inspo", "seed": 2}]
    rows = {row["arm"]: row for row in results["arms"]}
    inspo = rows["inspo"]
    per = {entry["benchmark"]: entry for entry in inspo["benchmarks"]}
    assert per["nq"]["seeds"] == [0, 1, 2] and per["nq"]["comparison"]["seeds"] == 3
    assert per["nq"]["comparison"]["mean"] == pytest.approx(0.2)
    assert per["nq"]["verdict"].startswith("inspo − static on nq: +20.0 EM points")
    assert per["hotpotqa"]["seeds"] == [0, 1] and per["hotpotqa"]["comparison"]["mean"] == pytest.approx(0.0)
    average = inspo["comparison"]  # on seeds 0 and 1, which finished both benchmarks
    assert average["seeds"] == 2 and average["mean"] == pytest.approx((0.2 + 0.0) / 2)  # weighted by questions: 1/30
    assert average["benchmark_questions"] == {"nq": 40, "hotpotqa": 200} and average["questions"] == 240
    assert inspo["verdict"].startswith("inspo − static on Avg. of 2 benchmarks (each weighted 1/2): +10.0 EM points")
    assert "over 2 seeds × (40 + 200) questions" in inspo["verdict"]
    assert inspo["seeds"] == [0, 1] and inspo["mean_em"] == pytest.approx(((0.4 + 0.5) / 2 + (0.5 + 0.5) / 2) / 2)
    assert rows["static"]["verdict"] is None and all(e["verdict"] is None for e in rows["static"]["benchmarks"])
    assert rows["static"]["mean_em"] == pytest.approx(((0.2 + 0.3 + 0.25) / 3 + 0.5) / 2)
    json.dumps(results)


def test_one_benchmark_keeps_its_verdict_as_before_and_lists_itself_as_the_only_benchmark():
    results = experiment_results(
        three_seed_experiment(), {"static": scores({0: 0.2, 1: 0.3}), "inspo": scores({0: 0.4, 1: 0.3})}, {}
    )
    inspo = next(row for row in results["arms"] if row["arm"] == "inspo")
    assert inspo["verdict"].startswith("inspo − static: +10.0 EM points")
    [entry] = inspo["benchmarks"]
    assert entry["benchmark"] == "builtin" and entry["verdict"].startswith("inspo − static on builtin: +10.0")
    assert entry["comparison"] == {**inspo["comparison"]}


def test_the_markdown_of_several_benchmarks_has_table_1_and_each_benchmarks_verdicts():
    text = results_markdown(two_benchmark_results())
    assert "Evaluation: nq, hotpotqa, test split" in text and "unweighted average over the 2 benchmarks" in text
    assert "| arm | nq | hotpotqa | Avg. |" in text
    assert "| inspo | 0.450 | 0.500 | 0.475 |" in text
    assert "- inspo − static on nq: +20.0 EM points" in text and "- inspo − static on hotpotqa: +0.0" in text


def test_a_run_with_several_benchmarks_finished_once_every_benchmarks_answers_are_there(tmp_path):
    from inspo_engine.coevolution import evaluation_file, write_answers

    sink = JsonlSink(tmp_path / "events.jsonl")
    sink.emit(RunStarted(config={}, time=1.0))
    sink.emit(
        RunFinished(step=0, status="finished", best_instruction_id="i0", best_instruction="x", overhead=Overhead())
    )
    sink.close()
    write_answers(evaluation_file(tmp_path, 0, "nq"), [{"question_id": "a", "em": 1.0, "f1": 1.0, "answer": "x"}])
    assert not read_run(tmp_path, ["nq", "hotpotqa"]).finished
    write_answers(evaluation_file(tmp_path, 0, "hotpotqa"), [{"question_id": "b", "em": 0.0, "f1": 0.5}])
    outcome = read_run(tmp_path, ["nq", "hotpotqa"])
    assert outcome.finished and outcome.em == {"nq": {"a": 1.0}, "hotpotqa": {"b": 0.0}}
    assert outcome.f1["hotpotqa"] == {"b": 0.5} and read_run(tmp_path, "nq").em == {"nq": {"a": 1.0}}


def _rules(config, cache_dir):
    from inspo_engine.optimizers import optimizer_for

    return optimizer_for(config, cache_dir, None)


# -- the same questions for every run ----------------------------------------------------------------------------


def test_every_arm_and_seed_is_evaluated_on_the_same_questions_drawn_by_the_sample_seed():
    from inspo_engine.env.datasets import eval_questions, load_questions

    experiment = experiment_from_dict(
        {"preset": "smoke", "arms": ["static", "inspo"], "seeds": 2, "evaluation": {"size": 10, "sample_seed": 4}}
    )
    drawn = {
        (arm, seed): [q.id for q in eval_questions(arm_config(experiment, arm, seed).eval, "builtin")]
        for arm, seed in experiment.runs()
    }
    assert len(set(map(tuple, drawn.values()))) == 1
    ids = drawn["static", 0]
    everything = [q.id for q in load_questions("builtin", "test")]
    assert len(ids) == 10 and ids != everything[:10]  # drawn, not the first ten
    assert ids == [i for i in everything if i in set(ids)]  # in the benchmark's order
    other = arm_config(experiment, "static", 0).with_overrides({"eval.sample_seed": 5})
    assert [q.id for q in eval_questions(other.eval, "builtin")] != ids


def test_without_a_sample_seed_a_run_is_evaluated_on_the_first_questions_as_before():
    from inspo_engine.env.datasets import eval_questions, load_questions

    config = preset("smoke")
    assert config.eval.sample_seed is None and config.eval.split == "test"
    first = [q.id for q in load_questions("builtin", "test")[: config.eval.eval_samples]]
    assert [q.id for q in eval_questions(config.eval, "builtin")] == first


def test_the_reward_curve_counts_at_each_step_only_the_seeds_that_recorded_it():
    """#54 item 6: a seed whose run recorded steps 3 and 4 only (rewound, or recorded from a later start) is counted
    at those steps, not at the first two."""
    from inspo_engine.experiments import reward_curve

    curve = reward_curve({0: [0.1, 0.2, 0.3, 0.4], 1: {3: 0.5, 4: 0.7}})
    assert curve["steps"] == [1, 2, 3, 4] and curve["seeds"] == [1, 1, 2, 2]
    assert curve["mean"] == pytest.approx([0.1, 0.2, 0.4, 0.55])
