"""A run's data for the dashboards and its downloads, read back from a run the engine really trained (on the
scripted policy): metric series, population history, lineage, evaluations, trajectories, best instruction,
the population export and checkpoint archives."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest
from rest_framework.renderers import JSONRenderer

from webapp.runs import selectors, services
from webapp.runs.models import Checkpoint, Instruction, PopulationSnapshot, StepMetric

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(alice, api):
    return api(alice)


def get(client, run, tail, **params):
    response = client.get(f"/api/v1/runs/{run.pk}/{tail}", params)
    assert response.status_code == 200, response.content
    return response


def test_metric_series_are_column_wise_one_value_per_step(client, scripted_run):
    series = get(client, scripted_run, "metrics/").json()
    assert series["step"] == [1, 2, 3, 4, 5, 6]
    for name in ("reward_mean", "reward_std", "tool_calls_mean", "kl", "lr", "entropy", "clip_fraction"):
        assert len(series[name]) == 6
    assert series["kl"][0] == StepMetric.objects.get(run=scripted_run, step=1).kl
    assert len(series["timings"]["update"]) == 6


def test_population_history_has_every_snapshot_column_wise_with_member_stats(client, scripted_run):
    history = get(client, scripted_run, "population/").json()
    snapshots = history["snapshots"]
    count = PopulationSnapshot.objects.filter(run=scripted_run).count()
    assert all(len(column) == count for column in snapshots.values())
    assert snapshots["reason"][0] == "initialised" and snapshots["step"][0] == 0
    assert {i["id"] for i in history["instructions"]} <= set(scripted_run.instructions.values_list("key", flat=True))
    last = count - 1
    members = {
        i["id"]
        for i in history["instructions"]
        if i["start"] + len(i["weight"]) > last and i["weight"][last - i["start"]] is not None
    }
    assert snapshots["best_id"][last] in members
    for instruction in history["instructions"]:
        lengths = {len(instruction[name]) for name in ("weight", "probability", "samples", "mean_reward")}
        assert len(lengths) == 1 and instruction["weight"][0] is not None and instruction["weight"][-1] is not None


def test_lineage_links_children_to_parents_with_the_critique(client, scripted_run):
    lineage = get(client, scripted_run, "lineage/").json()
    nodes = {n["id"]: n for n in lineage["nodes"]}
    assert len(nodes) == Instruction.objects.filter(run=scripted_run).count()
    for edge in lineage["edges"]:
        assert nodes[edge["target"]]["parent_id"] == edge["source"]
    evolved = [n for n in nodes.values() if n["origin"] == "reflection"]
    assert evolved and all(n["critique"] and n["round_id"] for n in evolved)
    round_ = next(r for r in lineage["rounds"] if r["proposer"] == "reflection")
    assert round_["failures"] and round_["candidates"] and round_["optimizer_model"] == "gemini-2.5-pro"
    assert any(c["accepted"] and c["instruction_id"] for r in lineage["rounds"] for c in r["candidates"])
    assert any(c["reason"] for r in lineage["rounds"] for c in r["candidates"] if not c["accepted"])


def test_evaluations_and_trajectories(client, scripted_run):
    evaluations = get(client, scripted_run, "evaluations/").json()
    assert evaluations["results"][0]["benchmark"] == "builtin" and evaluations["results"][0]["source"] == "training"
    assert "em" in evaluations["table"]["builtin"]
    newest = get(client, scripted_run, "trajectories/").json()
    assert newest["step"] == 6 and len(newest["trajectories"]) == 2
    assert get(client, scripted_run, "trajectories/", step=2).json()["step"] == 2
    assert get(client, scripted_run, "trajectories/", step=99).json()["trajectories"] == []


def test_best_instruction_as_text_and_as_json_with_lineage_weight_and_config(client, scripted_run):
    best = scripted_run.best_instruction
    text = get(client, scripted_run, "best-instruction.txt")
    assert text["Content-Type"].startswith("text/plain") and text.content.decode() == best.text + "\n"
    body = get(client, scripted_run, "best-instruction/").json()
    assert body["instruction"]["id"] == best.key and body["instruction"]["weight"] is not None
    assert body["instruction"]["lineage"][0]["id"] == best.key
    assert body["instruction"]["lineage"][-1]["parent_id"] is None
    assert body["config"] == scripted_run.config


def test_the_population_export_holds_everything_in_one_document(client, scripted_run):
    response = get(client, scripted_run, "export/")
    assert "attachment" in response["Content-Disposition"]
    export = response.json()
    assert export["best_instruction_id"] == scripted_run.best_instruction.key
    assert len(export["instructions"]) == Instruction.objects.filter(run=scripted_run).count()
    assert export["population_history"] and export["rounds"] and export["config"]["seed"] == 5


def test_a_checkpoint_downloads_as_a_tar_of_its_state_and_policy_matching_its_sha256(client, scripted_run):
    checkpoint = Checkpoint.objects.filter(run=scripted_run, available=True).order_by("-step").first()
    listing = get(client, scripted_run, "checkpoints/").json()
    assert [c["step"] for c in listing] == [2, 4, 6]
    response = get(client, scripted_run, f"checkpoints/{checkpoint.pk}/archive/")
    data = b"".join(response.streaming_content)
    assert len(data) == int(response["Content-Length"]) == checkpoint.archive_bytes
    assert hashlib.sha256(data).hexdigest() == checkpoint.sha256 and response["ETag"] == f'"{checkpoint.sha256}"'
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [f["name"] for f in checkpoint.files]
        state = json.loads(archive.extractfile("step-000006/policy/scripted.json").read())
        population = json.loads(archive.extractfile("step-000006/inspo_state.json").read())["population"]
    assert state["updates"] == 6
    stored = set(Instruction.objects.filter(run=scripted_run).values_list("key", flat=True))
    assert {ins["id"] for ins in population["archive"]} == stored, "the population and lineage it was trained with"


def test_a_deleted_checkpoint_is_gone(client, scripted_run):
    deleted = Checkpoint.objects.get(run=scripted_run, step=2)
    assert not deleted.available
    response = client.get(f"/api/v1/runs/{scripted_run.pk}/checkpoints/{deleted.pk}/archive/")
    assert response.status_code == 410


def test_a_run_without_instructions_has_no_best_instruction_yet(alice, alice_team, api):
    from tests.factories import RunFactory

    run = RunFactory(team=alice_team)
    client = api(alice)
    assert client.get(f"/api/v1/runs/{run.pk}/best-instruction/").status_code == 404
    assert client.get(f"/api/v1/runs/{run.pk}/best-instruction.txt").status_code == 404
    assert client.get(f"/api/v1/runs/{run.pk}/metrics/").json()["step"] == []


@pytest.mark.parametrize(
    ("tail", "read"),
    [
        ("metrics/", lambda run: selectors.run_metric_series(run=run)),
        ("population/", lambda run: selectors.run_population_columns(run=run)),
        ("lineage/", lambda run: selectors.run_lineage(run=run)),
        ("evaluations/", lambda run: selectors.run_evaluations(run=run)),
        ("trajectories/", lambda run: selectors.run_trajectories(run=run)),
        ("export/", lambda run: services.instruction_export(run=run, user=run.creator)),
    ],
)
def test_the_output_serializers_send_what_the_selectors_read_unchanged(client, scripted_run, tail, read):
    """The views send the selectors' answers through their output serializers: nothing is lost or changed."""
    expected = json.loads(JSONRenderer().render(read(scripted_run)))
    assert get(client, scripted_run, tail).json() == expected


def test_the_comparison_is_sent_unchanged(client, scripted_run, alice_team):
    from tests.factories import RunFactory

    other = RunFactory(team=alice_team)
    runs = [scripted_run, other]
    expected = json.loads(JSONRenderer().render(selectors.run_compare(runs=runs, metric="em", baseline=other)))
    response = client.get("/api/v1/compare/", {"runs": f"{scripted_run.pk},{other.pk}", "baseline": str(other.pk)})
    assert response.json() == expected and expected["benchmarks"]["rows"][0]["values"]
