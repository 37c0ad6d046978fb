"""The command line, run for real: config show, clear errors, the smoke preset end to end, eval, Ctrl-C."""

import json
import os
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


def test_config_show_prints_the_preset_with_overrides_applied():
    done = cli(
        "config", "show", "--preset", "smoke", "--set", "temperature=0.05", "--set", "evolution.proposer=history"
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["population"]["temperature"] == 0.05
    assert config["evolution"]["proposer"] == "history"
    assert config["grpo"]["total_steps"] == 4


def test_a_bad_config_exits_2_naming_each_field():
    done = cli("config", "show", "--set", "group_size=1", "--set", "n_parents=9")
    assert done.returncode == 2
    assert "grpo.group_size: must be ≥ 2 and ≤ 64, got 1" in done.stderr
    assert "population.n_parents: must be ≤ population_size (7)" in done.stderr


def test_training_with_a_missing_dataset_exits_2_with_a_message(tmp_path):
    done = cli("train", "--preset", "smoke", "--set", "env.dataset=/nowhere/train.jsonl", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "/nowhere/train.jsonl" in done.stderr
    assert "Traceback" not in done.stderr


def test_resume_without_a_checkpoint_is_refused(tmp_path):
    done = cli("train", "--preset", "smoke", "--resume", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "no checkpoint" in done.stderr


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    done = cli("train", "--preset", "smoke", "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


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


def test_eval_record_needs_a_checkpoint_and_its_own_best_instruction(tmp_path):
    done = cli("eval", "--untrained", "--preset", "smoke", "--dataset", "builtin", "--record")
    assert done.returncode == 2 and "--record needs --checkpoint" in done.stderr


def test_eval_needs_a_checkpoint_or_untrained():
    done = cli("eval", "--dataset", "builtin")
    assert done.returncode == 2 and "--checkpoint" in done.stderr


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
