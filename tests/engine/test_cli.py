"""The command line, run for real: config show, clear errors, the smoke preset end to end, eval, Ctrl-C."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inspo_engine.config import RunConfig
from inspo_engine.evaluate import checkpoint_best
from inspo_engine.events import read_events

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "cache"


def cli(*args, **kwargs):
    env = {**os.environ, "INSPO_CACHE_DIR": str(CACHE), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "inspo_engine", *args], capture_output=True, text=True, cwd=ROOT, env=env, **kwargs
    )


@pytest.mark.slow
def test_config_show_prints_the_preset_with_overrides_applied():
    done = cli(
        "config", "show", "--preset", "smoke", "--set", "temperature=0.05", "--set", "evolution.proposer=history"
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["population"]["temperature"] == 0.05
    assert config["evolution"]["proposer"] == "history"
    assert config["grpo"]["total_steps"] == 4


@pytest.mark.slow
def test_a_bad_config_exits_2_naming_each_field():
    done = cli("config", "show", "--set", "group_size=1", "--set", "n_parents=9")
    assert done.returncode == 2
    assert "grpo.group_size: must be ≥ 2 and ≤ 64, got 1" in done.stderr
    assert "population.n_parents: must be ≤ population_size (7)" in done.stderr


@pytest.mark.slow
def test_training_with_a_missing_dataset_exits_2_with_a_message(tmp_path):
    done = cli("train", "--preset", "smoke", "--set", "env.dataset=/nowhere/train.jsonl", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "/nowhere/train.jsonl" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_resume_without_a_checkpoint_is_refused(tmp_path):
    done = cli("train", "--preset", "smoke", "--resume", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "no checkpoint" in done.stderr


@pytest.fixture
def smoke_run(smoke_cli_run):
    """The session's smoke run, trained once by the CLI (tests/conftest.py), and its finished process."""
    return smoke_cli_run


@pytest.mark.slow
def test_the_smoke_preset_prunes_evolves_verifies_and_checkpoints(smoke_run):
    out, done = smoke_run
    kinds = [e.kind for e in read_events(out / "events.jsonl")]
    assert kinds.count("step_completed") == 4
    for kind in ("instruction_pruned", "instruction_proposed", "instruction_verified", "checkpoint_saved"):
        assert kind in kinds, kind
    assert kinds[-1] == "run_finished"
    best = (out / "best_instruction.txt").read_text()
    assert "<answer>" in best and "</search>" in best
    checkpoints = sorted((out / "checkpoints").iterdir())
    assert (checkpoints[-1] / "policy" / "model.safetensors").exists()
    assert (checkpoints[-1] / "inspo_state.json").exists()
    assert "finished at step 4" in done.stdout
    assert "step" in done.stderr  # the progress bar
    for picture in ("fig2.png", "population.png"):  # drawn when the run ends
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_eval_prints_em_and_f1_per_benchmark(smoke_run):
    out, _ = smoke_run
    checkpoint = sorted((out / "checkpoints").iterdir())[-1]
    done = cli("eval", "--checkpoint", str(checkpoint), "--dataset", "builtin", "--limit", "2", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| builtin | 2 |" in done.stdout


@pytest.mark.slow
def test_eval_untrained_scores_the_presets_own_model_with_its_seed_instruction_and_keeps_every_answer(tmp_path):
    answers = tmp_path / "answers.json"
    args = ("eval", "--untrained", "--preset", "smoke", "--dataset", "builtin", "--limit", "2", "--json", str(answers))
    done = cli(*args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| builtin | 2 |" in done.stdout and "answered" in done.stdout
    saved = json.loads(answers.read_text())
    assert saved["instruction"].startswith("Answer the question below.")
    assert len(saved["answers"]["builtin"]) == 2
    assert {"em", "f1", "answered", "format", "response", "question"} <= set(saved["answers"]["builtin"][0])


@pytest.mark.slow
def test_eval_record_appends_each_benchmarks_em_and_f1_to_the_runs_events(smoke_run, tmp_path):
    out, _ = smoke_run
    source = sorted((out / "checkpoints").iterdir())[-1]
    run = tmp_path / "run"  # a copy of the run, so the shared smoke run's events stay as training wrote them
    checkpoint = run / "checkpoints" / source.name
    checkpoint.mkdir(parents=True)
    shutil.copy(source / "inspo_state.json", checkpoint)
    (checkpoint / "policy").symlink_to(source / "policy")
    shutil.copy(out / "events.jsonl", run)
    before = len(read_events(run / "events.jsonl"))
    answers = tmp_path / "answers.json"
    args = ("eval", "--checkpoint", str(checkpoint), "--dataset", "builtin", "--limit", "3", "--record")
    done = cli(*args, "--json", str(answers), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    added = read_events(run / "events.jsonl")[before:]
    assert [(e.kind, e.metric) for e in added] == [("eval_completed", "em"), ("eval_completed", "f1")]
    scored = json.loads(answers.read_text())["answers"]["builtin"]
    state = json.loads((checkpoint / "inspo_state.json").read_text())
    best = checkpoint_best(checkpoint, RunConfig.from_dict(state["config"]))
    for event in added:
        assert (event.step, event.benchmark, event.n) == (int(source.name.removeprefix("step-")), "builtin", 3)
        assert event.value == pytest.approx(sum(a[event.metric] for a in scored) / 3)
        assert event.checkpoint == str(checkpoint)
        assert event.instruction_id == best.id


@pytest.mark.slow
def test_eval_record_needs_a_checkpoint_and_its_own_best_instruction(tmp_path):
    done = cli("eval", "--untrained", "--preset", "smoke", "--dataset", "builtin", "--record")
    assert done.returncode == 2 and "--record needs --checkpoint" in done.stderr


@pytest.mark.slow
def test_eval_needs_a_checkpoint_or_untrained():
    done = cli("eval", "--dataset", "builtin")
    assert done.returncode == 2 and "--checkpoint" in done.stderr


@pytest.mark.slow
def test_plot_refuses_a_directory_without_events(tmp_path):
    done = cli("plot", str(tmp_path))
    assert done.returncode == 2 and "no events.jsonl" in done.stderr


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    env = {**os.environ, "INSPO_CACHE_DIR": str(CACHE)}
    args = [sys.executable, "-m", "inspo_engine", "train", "--preset", "smoke", "--set", "total_steps=40"]
    process = subprocess.Popen([*args, "--out", str(tmp_path)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    events = tmp_path / "events.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and '"step_completed"' not in (events.read_text() if events.exists() else ""):
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 130, stderr[-2000:]
    finished = [e for e in read_events(events) if e.kind == "run_finished"]
    assert finished and finished[0].status == "cancelled"
    assert finished[0].step < 40
    assert any(p.name == f"step-{finished[0].step:06d}" for p in (tmp_path / "checkpoints").iterdir())


# -- experiment -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_invalid_experiment_exits_2_naming_the_field(tmp_path):
    done = cli(
        "experiment", "--preset", "smoke", "--arms", "static", "--arm", "hot:temperature=0", "--out", str(tmp_path)
    )
    assert done.returncode == 2
    assert "arms.hot.population.temperature: must be > 0" in done.stderr
    done = cli("experiment", "--preset", "smoke", "--seeds", "0", "--set", "seed=3", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "overrides.seed: is set by the experiment's seeds" in done.stderr
    done = cli("experiment", "--preset", "smoke", "--threads", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and "--threads must be from 1 to 256" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing was started


@pytest.mark.slow
def test_an_experiment_refuses_a_run_directory_of_another_config(tmp_path):
    (tmp_path / "static-s0").mkdir()
    (tmp_path / "static-s0" / "config.json").write_text(json.dumps({"seed": 0}))
    done = cli("experiment", "--preset", "smoke", "--arms", "static", "--seeds", "1", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "holds a run of another config" in done.stderr


EXPERIMENT = ["experiment", "--preset", "smoke", "--arms", "static,random-pool", "--seeds", "2", "--jobs", "1"]
SHORT = ["--set", "total_steps=1", "--set", "evolve_until=1", "--set", "checkpoint.keep_last=1", "--eval-size", "3"]
SHORT += ["--set", "checkpoint.optimizer_state=all"]  # so that the last checkpoint can resume


def logs(out):
    return {path.parent.name: path.read_bytes() for path in sorted(out.glob("*/train.log"))}


@pytest.mark.slow
def test_an_experiment_trains_every_arm_and_seed_writes_the_results_and_resumes_without_doing_work_twice(
    tmp_path, tiny_llama_dir
):
    # the session's tiny random-weight Llama: what is tested is the experiment's bookkeeping, not SmolLM2's weights
    tiny = ["--set", f"backend.model={tiny_llama_dir}"]
    done = cli(*EXPERIMENT, *SHORT, *tiny, "--threads", "2", "--out", str(tmp_path), timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    first_start = next(e for e in read_events(tmp_path / "static-s0" / "events.jsonl") if e.kind == "run_started")
    assert first_start.machine["threads"] == "2"  # each run's torch threads, as --threads asked
    for name in ("experiment.json", "results.json", "results.md", "reward.png", "em.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["complete"] and results["missing"] == []
    assert len(results["runs"]) == 4 and all(run["peak_rss_kib"] > 100_000 for run in results["runs"])
    rows = {row["arm"]: row for row in results["arms"]}
    assert rows["static"]["seeds"] == rows["random-pool"]["seeds"] == [0, 1]
    assert rows["random-pool"]["questions"] == 3 and rows["random-pool"]["comparison"]["seeds"] == 2
    assert rows["random-pool"]["verdict"].startswith("random-pool − static: ")
    assert "| random-pool | 2 |" in (tmp_path / "results.md").read_text()
    (evaluation,) = (tmp_path / "static-s0" / "evaluations").glob("*.jsonl")
    answers = [json.loads(line) for line in evaluation.read_text().splitlines()]
    assert len(answers) == 3 and set(answers[0]) == {"question_id", "em", "f1", "answer"}
    first = logs(tmp_path)
    assert len(first) == 4

    again = cli(*EXPERIMENT, *SHORT, *tiny, "--out", str(tmp_path), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert logs(tmp_path) == first  # no run was started again
    assert json.loads((tmp_path / "results.json").read_text())["arms"] == results["arms"]

    # a run that stopped before its end (no final evaluation, no run_finished): only that one resumes
    events = tmp_path / "static-s1" / "events.jsonl"
    kept = [line for line in events.read_text().splitlines() if '"run_finished"' not in line]
    events.write_text("\n".join(kept) + "\n")
    shutil.rmtree(tmp_path / "static-s1" / "evaluations")
    resumed = cli(*EXPERIMENT, *SHORT, *tiny, "--out", str(tmp_path), timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = logs(tmp_path)
    assert {name for name in after if after[name] != first[name]} == {"static-s1"}
    started = [e for e in read_events(events) if e.kind == "run_started"]
    assert [e.resumed_from_step for e in started] == [0, 1]  # from its checkpoint of step 1, not from scratch


@pytest.mark.slow
def test_failed_runs_leave_the_results_written_with_the_missing_runs_named_and_exit_1(tmp_path):
    broken = ["--set", "env.dataset=/nowhere/train.jsonl"]
    done = cli(*EXPERIMENT, *broken, "--seeds", "1", "--out", str(tmp_path), timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(m["arm"], m["seed"]) for m in results["missing"]] == [("static", 0), ("random-pool", 0)]
    assert (
        "Missing runs (no final evaluation yet): static seed 0, random-pool seed 0."
        in (tmp_path / "results.md").read_text()
    )
    assert "static-s0 failed (exit 2)" in done.stderr
    assert "/nowhere/train.jsonl" in (tmp_path / "static-s0" / "train.log").read_text()


def test_a_custom_arms_values_may_hold_commas_and_a_repeated_arm_adds_to_it():
    from inspo_engine.cli import build_parser, experiment_of

    text = "Use <think> </think>, <search> </search>, <information> </information> and <answer> </answer>."
    first = f"two:population.initial_instructions={json.dumps([text])},lr=2e-5"
    command = ["experiment", "--preset", "smoke", "--arms", "static", "--out", "unused"]
    args = build_parser().parse_args([*command, "--arm", first, "--arm", "two:temperature=0.5"])
    arms = experiment_of(args).arms
    assert arms["two"] == {"population.initial_instructions": [text], "lr": 2e-5, "temperature": 0.5}
    assert arms["static"] == {"mode": "static"}


def test_a_repeated_eval_benchmark_evaluates_every_run_on_each_and_none_means_builtin():
    from inspo_engine.cli import build_parser, experiment_of

    command = ["experiment", "--preset", "smoke", "--arms", "static", "--out", "unused"]
    args = build_parser().parse_args([*command, "--eval-benchmark", "builtin", "--eval-benchmark", "nq.jsonl"])
    assert experiment_of(args).evaluation.benchmarks == ("builtin", "nq.jsonl")
    assert experiment_of(build_parser().parse_args(command)).evaluation.benchmarks == ("builtin",)


def test_experiment_help_names_each_built_in_arm_with_its_meaning(capsys):
    from inspo_engine.cli import build_parser
    from inspo_engine.experiments import BUILTIN_ARM_MEANINGS, BUILTIN_ARMS

    assert set(BUILTIN_ARM_MEANINGS) == set(BUILTIN_ARMS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["experiment", "--help"])
    text = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))  # argparse wraps lines, at hyphens too
    for name, meaning in BUILTIN_ARM_MEANINGS.items():
        assert f"{name}: {meaning}" in text
    assert build_parser().parse_args(["experiment", "--out", "x"]).arms == "static,inspo,no-verify,random-pool"
