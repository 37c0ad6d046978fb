"""Property-based: schemathesis reads /api/schema/ and throws generated requests at every operation, both on
made-up ids and on a real run with data and a checkpoint; no request may end in a server error (5xx)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.factories import (
    CheckpointFactory,
    EvaluationFactory,
    InstructionFactory,
    PopulationMemberFactory,
    RunFactory,
    StepMetricFactory,
    TrajectoryFactory,
)
from webapp.accounts.services import api_token_create
from webapp.runs.models import Run


@pytest.fixture
def world(db, alice, alice_team, bob, tmp_path):
    """A token of alice's, and a run of her team with data in every table and a checkpoint on disk."""
    run = RunFactory(team=alice_team, creator=alice, status="failed")
    seed = InstructionFactory(run=run, key="ins-0000")
    InstructionFactory(run=run, key="ins-0001", parent=seed, origin="reflection", birth_step=2)
    run.best_instruction = seed
    run.save()
    StepMetricFactory(run=run, step=1)
    PopulationMemberFactory(snapshot__run=run, instruction=seed)
    TrajectoryFactory(run=run, instruction=seed)
    EvaluationFactory(run=run, instruction=seed)
    policy = tmp_path / "step-000002" / "policy"
    policy.mkdir(parents=True)
    (policy / "model.safetensors").write_bytes(b"\x00" * 1000)
    checkpoint = CheckpointFactory(run=run, step=2, path=str(policy.parent))
    _, key = api_token_create(user=alice, name="schemathesis")
    return {"headers": {"Authorization": f"Token {key}"}, "run_id": str(run.pk), "checkpoint_id": checkpoint.pk}


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


def real_ids(operation, world):
    """Path parameters naming the real run (and checkpoint), so generated bodies and queries reach real code."""
    names = {p.name for p in operation.path_parameters}
    return {key: world[key] for key in ("run_id", "checkpoint_id") if key in names}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_causes_a_server_error(api_schema, world, mode):
    """Every operation, made-up ids and real ones. (Driven through Hypothesis directly: schemathesis' pytest
    loader does not run under pytest 9.)"""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 19
    for operation in operations:
        for fixed in ({}, real_ids(operation, world)):
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed or None)

            @given(strategy)
            @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
            def check(case):
                case.call_and_validate(headers=world["headers"], checks=[not_a_server_error])

            try:
                check()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing of this operation can be made invalid
            if not fixed:
                break
    if mode is GenerationMode.POSITIVE:  # valid generated requests really got through, not just 4xx
        assert Run.objects.count() > 1
