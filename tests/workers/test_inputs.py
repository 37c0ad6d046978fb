"""Every worker reads a run's stored config the one way (`workers.inputs.stored_config`): admitted again once
(`config_confine`: data pinned, paths confined, built and validated by the engine) before training, evaluating or
scoring a heatmap; and workers read the database through the web app's selectors and write through its services,
never with a query of their own."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from inspo_engine.config import RunConfig
from tests.conftest import scripted_config
from tests.engine.fakes import ScriptedBackend
from webapp.runs import services
from webapp.runs.heatmaps import heatmap_request
from webapp.runs.models import Run
from workers import inputs
from workers.evaluation import evaluation_execute
from workers.heatmap import heatmap_execute
from workers.training import run_execute

from .test_evaluation import Answers

WORKERS = Path(inputs.__file__).parent


@pytest.fixture
def admitted(monkeypatch):
    """Each stored config admitted on a worker, and the function that asked for it."""
    calls: list[tuple[str, dict]] = []
    real = inputs.config_confine

    def spy(data, **kwargs):
        calls.append((inspect.stack()[1].function, data))
        return real(data, **kwargs)

    monkeypatch.setattr(inputs, "config_confine", spy)
    return calls


@pytest.fixture
def validations(monkeypatch):
    """Where each RunConfig the worker validates is validated: the module that called `RunConfig.from_dict` or
    `validate`. The engine's own checks (its loop validates the config it is given) are the engine's."""
    callers: list[str] = []
    real = RunConfig.validate

    def counting(self: RunConfig) -> None:
        caller = next(f for f in inspect.stack()[1:] if not f.filename.endswith("inspo_engine/config.py"))
        if "inspo_engine" not in caller.filename:
            callers.append(Path(caller.filename).name)
        real(self)

    monkeypatch.setattr(RunConfig, "validate", counting)
    return callers


@pytest.mark.django_db
def test_training_admits_the_stored_config_once_through_stored_config(
    alice, alice_team, gemini_url, worker_settings, admitted, validations
):
    run = services.run_submit(team=alice_team, user=alice, name="trained", config=scripted_config())
    validations.clear()
    assert run_execute(run_id=run.pk, worker="cpu@tests", backend=ScriptedBackend(seed=5)) == "finished"
    assert admitted == [("stored_config", Run.objects.get(pk=run.pk).config)]
    assert validations == ["configs.py"]


@pytest.mark.django_db
def test_an_evaluation_and_a_heatmap_admit_the_stored_config_once_each(scripted_run, alice, admitted, validations):
    request = services.run_evaluate(run=scripted_run, user=alice, benchmarks=["builtin"], limit=2)
    assert evaluation_execute(request_id=request.pk, answerer=Answers) == "finished"
    assert admitted == [("stored_config", scripted_run.config)] and validations == ["configs.py"]

    admitted.clear()
    validations.clear()
    heatmap = heatmap_request(run=scripted_run, user=alice, top_k=1, steps=[6], sample_size=2)
    assert heatmap_execute(heatmap_id=heatmap.pk, worker="cpu@tests", answerer=Answers) == "finished"
    assert admitted == [("stored_config", scripted_run.config)] and validations == ["configs.py"]


def test_no_worker_queries_the_database_itself():
    """Reads go through `webapp.<app>.selectors` (or its service module's readers), writes through services."""
    queries = re.compile(r"\.objects\b|\.select_related\(|\.values_list\(|\.update\(")
    found = {
        f"{path.name}:{number}": line.strip()
        for path in sorted(WORKERS.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if queries.search(line)
    }
    assert found == {}
