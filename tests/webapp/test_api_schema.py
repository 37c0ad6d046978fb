"""The API answers as its OpenAPI schema says. schemathesis reads /api/schema/ and throws generated requests at every
operation — valid and invalid ones, on made-up ids, on a real run of the caller's team with data in every table, and
on another team's run — and checks each answer: no server error, a documented status code, content type, headers
and body, invalid input refused, and another team's run never served."""

from __future__ import annotations

import pytest
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.factories import (
    CheckpointFactory,
    EvaluationFactory,
    EvolutionRoundFactory,
    InstructionFactory,
    PopulationMemberFactory,
    RunFactory,
    StepMetricFactory,
    TrajectoryFactory,
)
from webapp.accounts.services import api_token_create
from webapp.runs.models import Candidate, DiversityRecord, Heatmap, HeatmapCell, PopulationAlarm, Run

EXAMPLES = 8
"""Generated requests per operation, mode and set of ids: the whole test stays well under a minute."""


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
ANSWER = {
    "instruction_id": "ins-0000",
    "question_id": "q1",
    "question": "Who?",
    "golden_answers": ["you"],
    "response": "<answer> me </answer>",
    "answer": "me",
    "reward": 0.0,
    "tool_calls": 0,
    "response_tokens": 4,
    "error": None,
    "em": 0.0,
    "f1": 0.0,
}
"""A heatmap cell's answer as the worker stores it."""
NOT_SERVED = {400, 404}
"""What a request on another team's run may get: 404, or 400 for input refused before the run is looked up."""


def data_run(team, creator, path):
    """A failed run with something in every table (an optimizer round with a candidate and failures included, a
    heatmap with a scored cell) and a checkpoint on disk under `path`."""
    run = RunFactory(team=team, creator=creator, status=Run.Status.FAILED)
    seed = InstructionFactory(run=run, key="ins-0000")
    evolution = EvolutionRoundFactory(
        run=run,
        parent=seed,
        failures=[{"question": "Who?", "response": "<answer> me </answer>", "golden_answers": ["you"], "reward": 0.0}],
    )
    child = InstructionFactory(run=run, key="ins-0001", parent=seed, origin="reflection", birth_step=2, round=evolution)
    Candidate.objects.create(round=evolution, position=0, text=child.text, valid=True, score=0.5, accepted=True)
    run.best_instruction = seed
    run.save()
    StepMetricFactory(run=run, step=1)
    PopulationMemberFactory(snapshot__run=run, instruction=seed)
    TrajectoryFactory(run=run, instruction=seed)
    EvaluationFactory(run=run, instruction=seed)
    policy = path / f"{run.pk}-step-000002" / "policy"
    policy.mkdir(parents=True)
    (policy / "model.safetensors").write_bytes(b"\x00" * 1000)
    checkpoint = CheckpointFactory(run=run, step=2, path=str(policy.parent))
    heatmap = Heatmap.objects.create(run=run, benchmark="builtin", sample_size=1, status=Heatmap.Status.FINISHED)
    cell = HeatmapCell.objects.create(
        heatmap=heatmap,
        instruction=seed,
        checkpoint=checkpoint,
        row=0,
        column=0,
        em=0.0,
        f1=0.0,
        n=1,
        trajectories=[ANSWER],
    )
    now = timezone.now()
    DiversityRecord.objects.create(
        run=run, step=1, reason="step", size=1, strategies=1, entropy=0.0, time=now
    )  # a population of one: its pairwise measures are null
    alarm = PopulationAlarm.objects.create(
        run=run, step=1, since_step=0, reasons=["entropy"], collapse_cosine=0.95, collapse_entropy=0.05, time=now
    )
    return {
        "run_id": str(run.pk),
        "checkpoint_id": checkpoint.pk,
        "heatmap_id": heatmap.pk,
        "cell_id": cell.pk,
        "alarm_id": alarm.pk,
    }


@pytest.fixture
def world(db, alice, alice_team, bob, bob_team, tmp_path):
    """A token of alice's; two runs of her team with data and checkpoints (one to compare with), and one of bob's."""
    _, key = api_token_create(user=alice, name="schemathesis")
    ours, other = data_run(alice_team, alice, tmp_path), data_run(alice_team, alice, tmp_path)
    return {
        "headers": {"Authorization": f"Token {key}"},
        "ours": ours,
        "foreign": data_run(bob_team, bob, tmp_path),
        "compared": [ours["run_id"], other["run_id"]],
    }


@pytest.fixture
def api_schema(world):
    """The schema, loaded from the running app. Requests reach Django's real WSGI handler; like Django's own test
    client, keep it from closing the test's database connection at the end of each request."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from webapp.config.wsgi import application

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", application, headers=world["headers"])
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def fixed_values(operation, world):
    """What each round of generated requests keeps fixed, and whether it names another team's run: nothing
    (made-up ids), the ids of alice's run, those of bob's run; for the comparison, alice's two runs."""
    names = {p.name for p in operation.path_parameters} & {
        "run_id",
        "checkpoint_id",
        "heatmap_id",
        "cell_id",
        "alarm_id",
    }
    if operation.path.endswith("/compare/"):
        return [({}, False), ({"query": {"runs": world["compared"]}}, False)]
    if not names:
        return [({}, False)]
    ours, foreign = ({"path_parameters": {key: world[who][key] for key in names}} for who in ("ours", "foreign"))
    return [({}, False), (ours, False), (foreign, True)]


def exercise(strategy, headers, *, foreign):
    """Generated requests of one operation, each answer checked; with `foreign`, none may serve bob's run."""

    @given(strategy)
    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
    )
    def check(case):
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        if foreign:
            assert response.status_code in NOT_SERVED, f"{case.method} {case.formatted_path} served bob's run"

    check()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.slow
def test_every_operation_answers_as_its_schema_says(api_schema, world, mode):
    """Every operation, with 0 violations. (Driven through Hypothesis directly: schemathesis' pytest loader does
    not run under pytest 9.)"""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 24
    for operation in operations:
        for fixed, foreign in fixed_values(operation, world):
            try:
                exercise(operation.as_strategy(generation_mode=mode, **fixed), world["headers"], foreign=foreign)
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing of this operation can be made invalid
    if mode is GenerationMode.POSITIVE:  # valid generated requests really got through, not just 4xx
        assert Run.objects.count() > 3


def test_the_runs_list_is_documented_as_the_page_it_is(client, alice):
    client.force_login(alice)
    schema = client.get("/api/schema/?format=json").json()
    listed = schema["paths"]["/api/v1/runs/"]["get"]
    page = listed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    envelope = schema["components"]["schemas"][page]["properties"]
    assert set(envelope) == {"count", "next", "previous", "results"}
    assert {"page", "page_size"} <= {p["name"] for p in listed["parameters"]}
    assert {"400", "401", "404"} <= set(listed["responses"])
