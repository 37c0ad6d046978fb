"""Loading run directories of the engine's command line into the web app: the run directories are written by the
real engine loop (scripted policy, offline `rules` optimizer, JSONL events, checkpoints), then imported and read
back through the same APIs the dashboards use."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.http import Http404
from django.test import Client

from inspo_engine.checkpoints import latest_checkpoint
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import EvalCompleted, JsonlSink, read_events
from inspo_engine.optimizers.rules import RuleBasedClient
from inspo_engine.presets import preset
from tests.engine.fakes import ScriptedBackend, questions
from webapp.runs.configs import team_data_dir
from webapp.runs.imports import NO_END_EVENT, ImportRefused, run_import
from webapp.runs.models import Checkpoint, Evaluation, Instruction, PopulationSnapshot, Run, StepMetric, Trajectory
from webapp.runs.selectors import run_directory

pytestmark = pytest.mark.django_db

STEPS = 6


# -- run directories as `python -m inspo_engine train --out DIR` writes them ---------------------------------------


def small_config(**overrides):
    """The smoke preset for 6 steps: evolution after step 2, checkpoints every 2 steps, the newest 2 kept."""
    return preset("smoke").with_overrides(
        {"total_steps": STEPS, "population_size": 4, "verify_samples": 4, "seed": 5, **overrides}
    )


class FailingBackend(ScriptedBackend):
    """The scripted policy, whose update fails once it has made `fail_at` updates."""

    def __init__(self, seed, fail_at):
        super().__init__(seed)
        self.fail_at = fail_at

    def update(self, groups):
        if self.updates == self.fail_at:
            raise RuntimeError("out of memory in the update")
        return super().update(groups)


class StopAfter:
    """`should_stop` that says yes after `steps` steps, as Ctrl-C during `train` does."""

    def __init__(self, steps):
        self.steps = steps
        self.asked = 0

    def __call__(self):
        self.asked += 1
        return bool(self.steps) and self.asked >= self.steps


def train(out, config, *, backend=None, resume=False, stop_after=0):
    """What `train` of the command line does: config.json, events.jsonl (appended on resume), checkpoints/ and
    best_instruction.txt under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(config.to_json(), encoding="utf-8")
    sink = JsonlSink(out / "events.jsonl")
    loop = CoEvolution(
        config,
        backend=backend or ScriptedBackend(seed=config.seed),
        train_questions=questions(16),
        optimizer=RuleBasedClient(seed=config.seed),
        sink=sink,
        out_dir=out,
        eval_sets={"builtin": questions(8)},
        should_stop=StopAfter(stop_after),
    )
    if resume:
        loop.load_checkpoint(latest_checkpoint(out))
    try:
        result = loop.run()
    finally:
        sink.close()
    (out / "best_instruction.txt").write_text(result.best_instruction.text + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """An INSPO run and a static-instruction baseline, trained once for the module."""
    root = tmp_path_factory.mktemp("cli")
    train(root / "inspo", small_config())
    train(root / "static", small_config(mode="static"))
    return {"inspo": root / "inspo", "static": root / "static"}


@pytest.fixture
def runs_dir(settings, tmp_path):
    settings.INSPO_RUNS_DIR = tmp_path / "runs"
    return settings.INSPO_RUNS_DIR


@pytest.fixture
def copy_of(cli_runs, tmp_path):
    """A copy of a trained run directory, for tests that damage it."""

    def make(name):
        target = tmp_path / "copies" / name
        shutil.copytree(cli_runs[name], target)
        return target

    return make


def events_of(directory):
    return [e.to_dict() for e in read_events(directory / "events.jsonl")]


# -- what an import stores ------------------------------------------------------------------------------------------


def test_a_finished_cli_run_is_stored_like_a_worker_run(alice, alice_team, cli_runs, runs_dir):
    source = cli_runs["inspo"]
    events = events_of(source)
    run = run_import(team=alice_team, user=alice, directory=source)

    assert (run.team, run.creator, run.name) == (alice_team, alice, "inspo")
    assert run.status == Run.Status.FINISHED and run.error == ""
    assert (run.step, run.total_steps, run.backend) == (STEPS, STEPS, "torch")
    assert run.config == RunConfig.from_json((source / "config.json").read_text()).to_dict()
    assert run.started_at is not None and run.finished_at is not None and not run.is_active

    steps = [e for e in events if e["kind"] == "step_completed"]
    stored = StepMetric.objects.filter(run=run).order_by("step")
    assert [m.step for m in stored] == list(range(1, STEPS + 1))
    assert [m.reward_mean for m in stored] == [e["reward_mean"] for e in steps]
    assert stored.last().kl == steps[-1]["metrics"]["kl"]

    snapshots = PopulationSnapshot.objects.filter(run=run)
    assert snapshots.count() == sum(e["kind"] == "population_changed" for e in events)
    assert all(s.members.exists() for s in snapshots)
    assert Trajectory.objects.filter(run=run).count() == sum(
        len(e["trajectories"]) for e in events if e["kind"] == "trajectories_sampled"
    )

    added = [e["instruction"] for e in events if e["kind"] == "instruction_added"]
    instructions = {i.key: i for i in Instruction.objects.filter(run=run).select_related("parent")}
    assert sorted(instructions) == sorted(a["id"] for a in added)
    children = [a for a in added if a["parent_id"]]
    assert children, "the rules optimizer proposed no instruction that joined"
    for child in children:
        assert instructions[child["id"]].parent.key == child["parent_id"]
        assert instructions[child["id"]].round is not None
    assert any(i.retired_step for i in instructions.values())

    finished = next(e for e in events if e["kind"] == "run_finished")
    assert run.best_instruction.key == finished["best_instruction_id"]
    assert run.best_instruction.text + "\n" == (source / "best_instruction.txt").read_text()
    assert sorted(Evaluation.objects.filter(run=run).values_list("benchmark", "metric")) == [
        ("builtin", "em"),
        ("builtin", "f1"),
    ]


def test_checkpoints_are_copied_under_the_runs_directory_and_download(alice, alice_team, api, cli_runs, runs_dir):
    run = run_import(team=alice_team, user=alice, directory=cli_runs["inspo"])
    home = run_directory(run_id=run.pk)
    checkpoints = {c.step: c for c in Checkpoint.objects.filter(run=run)}
    assert sorted(checkpoints) == [2, 4, 6]
    assert not checkpoints[2].available  # the engine kept the newest two
    for step in (4, 6):
        assert checkpoints[step].available and checkpoints[step].sha256
        assert Path(checkpoints[step].path) == home / "checkpoints" / f"step-{step:06d}"
        assert (Path(checkpoints[step].path) / "inspo_state.json").is_file()
    assert (home / "events.jsonl").read_bytes() == (cli_runs["inspo"] / "events.jsonl").read_bytes()

    response = api(alice).get(f"/api/v1/runs/{run.pk}/checkpoints/{checkpoints[6].pk}/archive/")
    assert response.status_code == 200
    data = b"".join(response.streaming_content)
    assert hashlib.sha256(data).hexdigest() == checkpoints[6].sha256
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert json.loads(archive.extractfile("step-000006/policy/scripted.json").read())["updates"] == STEPS
        assert json.loads(archive.extractfile("step-000006/inspo_state.json").read())["progress"]["step"] == STEPS


def test_the_compare_api_and_page_show_imported_runs_side_by_side(alice, alice_team, api, cli_runs, runs_dir):
    inspo = run_import(team=alice_team, user=alice, directory=cli_runs["inspo"])
    static = run_import(team=alice_team, user=alice, directory=cli_runs["static"], name="static baseline")
    response = api(alice).get("/api/v1/compare/", {"runs": f"{inspo.pk},{static.pk}", "baseline": str(static.pk)})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [r["name"] for r in body["runs"]] == ["inspo", "static baseline"]
    for run in (inspo, static):
        series = body["series"][str(run.pk)]
        assert series["step"] == list(range(1, STEPS + 1))
        assert series["reward_mean"] == list(StepMetric.objects.filter(run=run).values_list("reward_mean", flat=True))
    assert {"field": "mode", "values": {str(inspo.pk): "online", str(static.pk): "static"}} in body["config_diff"]
    assert [row["run_id"] for row in body["benchmarks"]["rows"]] == [str(inspo.pk), str(static.pk)]

    page = Client()
    page.force_login(alice)
    assert page.get(f"/compare/?runs={inspo.pk},{static.pk}").status_code == 200
    assert page.get(f"/runs/{inspo.pk}/").status_code == 200


def record_evaluation(directory, value):
    """What `eval --checkpoint … --record` appends to a finished run: EM and F1 of its newest checkpoint with I*."""
    checkpoint = latest_checkpoint(directory)
    best = read_events(directory / "events.jsonl")[-1].best_instruction_id
    sink = JsonlSink(directory / "events.jsonl")
    for metric, score in (("em", value), ("f1", value + 0.05)):
        sink.emit(
            EvalCompleted(
                step=STEPS, benchmark="builtin", metric=metric, value=score, n=195, instruction_id=best,
                checkpoint=str(checkpoint),
            )
        )  # fmt: skip
    sink.close()
    return best


def test_evaluations_recorded_after_training_reach_the_compare_table(alice, alice_team, api, copy_of, runs_dir):
    inspo, static = copy_of("inspo"), copy_of("static")
    best = record_evaluation(inspo, 0.25)
    record_evaluation(static, 0.125)
    runs = [run_import(team=alice_team, user=alice, directory=d) for d in (inspo, static)]
    stored = Evaluation.objects.get(run=runs[0], benchmark="builtin", metric="em", n=195)  # beside the run's own
    assert (stored.step, stored.value, stored.n, stored.instruction.key) == (STEPS, 0.25, 195, best)
    assert stored.checkpoint is not None and stored.checkpoint.step == STEPS
    ids = ",".join(str(run.pk) for run in runs)
    for metric, values in (("em", [0.25, 0.125]), ("f1", [0.30, 0.175])):
        table = api(alice).get("/api/v1/compare/", {"runs": ids, "metric": metric}).json()["benchmarks"]
        assert [row["values"]["builtin"] for row in table["rows"]] == pytest.approx(values)
        assert table["best"]["builtin"] == [str(runs[0].pk)]


def test_an_imported_run_belongs_to_the_given_team_only(alice, alice_team, bob, api, cli_runs, runs_dir):
    run = run_import(team=alice_team, user=alice, directory=cli_runs["inspo"])
    assert api(bob).get(f"/api/v1/runs/{run.pk}/").status_code == 404
    assert api(bob).get(f"/api/v1/runs/{run.pk}/metrics/").status_code == 404
    assert api(bob).get("/api/v1/compare/", {"runs": str(run.pk)}).status_code == 404
    assert api(alice).get(f"/api/v1/runs/{run.pk}/").status_code == 200
    page = Client()
    page.force_login(bob)
    assert page.get(f"/compare/?runs={run.pk}").status_code == 404


def test_only_members_of_the_team_may_import_into_it(alice_team, bob, victor, cli_runs, runs_dir):
    with pytest.raises(Http404):
        run_import(team=alice_team, user=bob, directory=cli_runs["inspo"])
    with pytest.raises(PermissionDenied):
        run_import(team=alice_team, user=victor, directory=cli_runs["inspo"])
    assert not Run.objects.exists()


# -- how the run ended ------------------------------------------------------------------------------------------------


def test_a_run_without_an_end_event_is_imported_as_failed(alice, alice_team, copy_of, runs_dir):
    directory = copy_of("inspo")
    lines = (directory / "events.jsonl").read_text().splitlines()
    last_step = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "step_completed")
    (directory / "events.jsonl").write_text("\n".join(lines[: last_step + 1]) + '\n{"kind": "popul')  # torn line
    run = run_import(team=alice_team, user=alice, directory=directory)
    assert run.status == Run.Status.FAILED
    assert run.error.startswith(NO_END_EVENT) and f"after step {STEPS}" in run.error
    assert StepMetric.objects.filter(run=run).count() == STEPS


@pytest.mark.slow
def test_a_cancelled_cli_run_is_imported_as_cancelled(alice, alice_team, tmp_path, runs_dir):
    train(tmp_path / "stopped", small_config(), stop_after=3)
    run = run_import(team=alice_team, user=alice, directory=tmp_path / "stopped")
    assert (run.status, run.step, run.error) == (Run.Status.CANCELLED, 3, "")
    assert Checkpoint.objects.filter(run=run, step=3, available=True).exists()


@pytest.mark.slow
def test_a_failed_then_resumed_cli_run_keeps_one_copy_of_each_step(alice, alice_team, tmp_path, runs_dir):
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError):
        train(out, small_config(), backend=FailingBackend(seed=5, fail_at=5))
    failed = run_import(team=alice_team, user=alice, directory=out, name="failed")
    assert failed.status == Run.Status.FAILED and "out of memory in the update" in failed.error
    assert failed.step == 5  # step 5 ran after the checkpoint of step 4

    train(out, small_config(), resume=True)
    run = run_import(team=alice_team, user=alice, directory=out)
    assert run.status == Run.Status.FINISHED and run.error == ""
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == list(range(1, STEPS + 1))
    events = events_of(out)
    restart = max(i for i, e in enumerate(events) if e["kind"] == "run_started")
    assert events[restart]["resumed_from_step"] == 4
    logged = [e for e in events[restart:] if e["kind"] == "trajectories_sampled" and e["step"] == 5]
    assert Trajectory.objects.filter(run=run, step=5).count() == len(logged[0]["trajectories"]) > 0
    assert PopulationSnapshot.objects.filter(run=run, step=5).count() == sum(
        e["kind"] == "population_changed" and e["step"] == 5 for e in events[restart:]
    )
    assert Instruction.objects.filter(run=run).count() == Instruction.objects.filter(run=failed).count()


# -- what is refused --------------------------------------------------------------------------------------------------


def assert_nothing_written(runs_dir):
    assert not Run.objects.exists()
    assert not any(Path(runs_dir).glob("*"))


def test_a_directory_without_events_is_refused(alice, alice_team, copy_of, runs_dir):
    directory = copy_of("inspo")
    (directory / "events.jsonl").unlink()
    with pytest.raises(ImportRefused, match=r"has no events\.jsonl"):
        run_import(team=alice_team, user=alice, directory=directory)
    assert_nothing_written(runs_dir)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"grpo": {"group_size": 1}}', "grpo.group_size: must be ≥ 2"),
        ("{not json", "not valid JSON"),
        (None, "has no config.json"),
        ('{"eval": {"split": "../teams/2/private/test"}}', "eval.split: must be a split's name"),
    ],
)
def test_an_invalid_config_is_refused(alice, alice_team, copy_of, runs_dir, config, message):
    directory = copy_of("inspo")
    if config is None:
        (directory / "config.json").unlink()
    else:
        (directory / "config.json").write_text(config)
    with pytest.raises(ImportRefused, match=re.escape(message)) as refused:
        run_import(team=alice_team, user=alice, directory=directory)
    assert isinstance(refused.value, ValueError) and message in str(refused.value)
    assert_nothing_written(runs_dir)


def rewrite_config(directory, changes):
    """config.json with `changes` ({"section": {"field": value}}) written over it, as a hostile directory would."""
    data = json.loads((directory / "config.json").read_text())
    for section, fields in changes.items():
        data[section].update(fields)
    (directory / "config.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"env": {"dataset": "/etc/passwd"}}, "env.dataset", "must lie in your team's data directory"),
        (
            {"env": {"retriever": "remote", "retriever_url": "http://169.254.169.254/retrieve"}},
            "env.retriever_url",
            "INSPO_ALLOWED_URL_HOSTS",
        ),
        (
            {"optimizer": {"provider": "gemini", "endpoint": "undeclared"}},
            "optimizer.endpoint",
            "name an optimizer endpoint of this server",
        ),
        ({"optimizer": {"provider": "openai", "base_url": "https://api.example.com/v1"}}, "optimizer.base_url", ""),
    ],
)
def test_a_config_a_submission_would_refuse_is_refused_naming_its_field(
    alice, alice_team, copy_of, runs_dir, changes, field, message
):
    directory = copy_of("inspo")
    rewrite_config(directory, changes)
    with pytest.raises(ImportRefused, match="as a submission would be") as refused:
        run_import(team=alice_team, user=alice, directory=directory)
    assert f"{field}: " in str(refused.value) and message in str(refused.value)
    assert_nothing_written(runs_dir)


def test_the_command_loads_nothing_when_a_config_names_a_file_outside_the_teams_data(
    alice, alice_team, cli_runs, copy_of, runs_dir
):
    hostile = copy_of("static")
    rewrite_config(hostile, {"env": {"corpus": "/etc/shadow"}})
    with pytest.raises(CommandError, match=r"env\.corpus: '/etc/shadow'"):
        call_command("import_run", str(cli_runs["inspo"]), str(hostile), "--team", "alices", "--user", "alice")
    assert_nothing_written(runs_dir)


def test_an_imported_config_is_stored_as_a_submission_stores_it(
    alice, alice_team, copy_of, runs_dir, settings, tmp_path
):
    settings.INSPO_DATA_DIR = tmp_path / "data"
    directory = copy_of("inspo")
    rewrite_config(directory, {"env": {"corpus": "wiki/corpus.jsonl"}, "eval": {"benchmarks": ["builtin", "nq"]}})
    run = run_import(team=alice_team, user=alice, directory=directory)
    root = team_data_dir(alice_team).resolve()
    assert run.config["env"]["corpus"] == str(root / "wiki" / "corpus.jsonl")
    assert run.config["eval"]["benchmarks"] == ["builtin", str(root / "nq")]
    assert run.status == Run.Status.FINISHED and StepMetric.objects.filter(run=run).count() == STEPS


def test_a_link_leading_out_of_the_directory_is_refused(alice, alice_team, copy_of, tmp_path, runs_dir):
    directory = copy_of("inspo")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web app")
    (directory / "checkpoints" / "step-000006" / "policy" / "tokenizer.json").symlink_to(secret)
    with pytest.raises(ImportRefused, match="leads outside"):
        run_import(team=alice_team, user=alice, directory=directory)
    assert_nothing_written(runs_dir)


def test_a_link_inside_the_directory_is_followed(alice, alice_team, copy_of, runs_dir):
    directory = copy_of("inspo")
    (directory / "checkpoints" / "step-000006" / "policy" / "again.json").symlink_to(directory / "config.json")
    run = run_import(team=alice_team, user=alice, directory=directory)
    copied = run_directory(run_id=run.pk) / "checkpoints" / "step-000006" / "policy" / "again.json"
    assert not copied.is_symlink() and copied.read_text() == (directory / "config.json").read_text()


def test_a_line_that_is_no_event_is_refused_with_its_number(alice, alice_team, copy_of, runs_dir):
    directory = copy_of("inspo")
    lines = (directory / "events.jsonl").read_text().splitlines()
    lines.insert(3, '{"kind": "no_such_event", "time": 0}')
    (directory / "events.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportRefused, match="line 4 is not an engine event"):
        run_import(team=alice_team, user=alice, directory=directory)
    assert_nothing_written(runs_dir)


def test_an_event_the_database_refuses_rolls_the_whole_import_back(alice, alice_team, copy_of, runs_dir):
    directory = copy_of("inspo")
    lines = (directory / "events.jsonl").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "step_completed")
    broken = json.loads(lines[last])
    broken["step"] = "six"
    lines[last] = json.dumps(broken)
    (directory / "events.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportRefused, match="could not be stored"):
        run_import(team=alice_team, user=alice, directory=directory)
    assert_nothing_written(runs_dir)


# -- the management command -----------------------------------------------------------------------------------------


def test_the_command_prints_each_run_id_and_the_compare_address(alice, alice_team, cli_runs, runs_dir):
    out = io.StringIO()
    dirs = [str(cli_runs["inspo"]), str(cli_runs["static"])]
    call_command(
        "import_run",
        *dirs,
        "--team",
        "Alice's team",
        "--user",
        "alice",
        "--name",
        "INSPO",
        "--name",
        "static",
        stdout=out,
    )
    lines = out.getvalue().splitlines()
    ids = [line.split()[0] for line in lines[:2]]
    runs = [Run.objects.get(pk=run_id) for run_id in ids]
    assert [(r.name, r.team, r.status) for r in runs] == [
        ("INSPO", alice_team, Run.Status.FINISHED),
        ("static", alice_team, Run.Status.FINISHED),
    ]
    assert lines[2] == f"compare: /compare/?runs={ids[0]},{ids[1]}"


def test_the_command_loads_nothing_when_one_directory_is_refused(alice, alice_team, bob, cli_runs, tmp_path, runs_dir):
    with pytest.raises(CommandError, match=r"has no config\.json"):
        call_command("import_run", str(cli_runs["inspo"]), str(tmp_path), "--team", "alices", "--user", "alice")
    with pytest.raises(CommandError, match="bob is not a member of Alice's team"):
        call_command("import_run", str(cli_runs["inspo"]), "--team", "alices", "--user", "bob")
    with pytest.raises(CommandError, match="2 --name for 1 directories"):
        call_command(
            "import_run", str(cli_runs["inspo"]), "--team", "alices", "--user", "alice", "--name", "a", "--name", "b"
        )
    assert_nothing_written(runs_dir)
