"""The dashboards' TypeScript types agree with the API's OpenAPI schema: every interface in frontend/src/types.ts
stands for one schema component (an output serializer) and has the same fields, optional exactly where the schema
does not require them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

TYPES = Path(__file__).resolve().parents[2] / "frontend" / "src" / "types.ts"
INTERFACE = re.compile(r"^export interface (\w+)(?:<\w+>)?(?: extends (\w+))? \{\n(.*?)^\}", re.MULTILINE | re.DOTALL)
PROPERTY = re.compile(r"^  (\w+)(\?)?:", re.MULTILINE)

COMPONENT = {
    "Run": "RunOutput",
    "RunDetail": "RunDetailOutput",
    "RunActivity": "RunActivityOutput",
    "EvaluationInProgress": "EvaluationInProgressOutput",
    "ConfigDiff": "ConfigDiffOutput",
    "Page": "PaginatedRunOutputList",
    "CompareSeries": "CompareSeriesOutput",
    "MetricSeries": "MetricSeriesOutput",
    "InstructionColumns": "InstructionColumns",
    "PopulationHistory": "PopulationOutput",
    "Member": "MemberOutput",
    "LineageNode": "LineageNodeOutput",
    "Failure": "FailureOutput",
    "Candidate": "CandidateOutput",
    "Round": "RoundOutput",
    "Edge": "EdgeOutput",
    "Lineage": "LineageOutput",
    "Trajectory": "TrajectoryOutput",
    "TrajectoryPage": "TrajectoryPageOutput",
    "CompareRun": "CompareRunOutput",
    "BenchmarkRow": "BenchmarkRowOutput",
    "BenchmarkTable": "BenchmarkTableOutput",
    "Comparison": "ComparisonOutput",
    "RunSummary": "RunSummaryOutput",
    "BestInstructionDetail": "BestInstructionDetailOutput",
    "BestInstruction": "BestInstructionOutput",
    "DiversitySeries": "DiversitySeriesOutput",
    "DiversitySettings": "DiversitySettingsOutput",
    "Alarm": "AlarmOutput",
    "Diversity": "DiversityOutput",
    "HeatmapRow": "HeatmapRowOutput",
    "HeatmapColumn": "HeatmapColumnOutput",
    "HeatmapCell": "HeatmapCellOutput",
    "Heatmap": "HeatmapOutput",
    "HeatmapPreview": "HeatmapPreviewOutput",
    "HeatmapAnswer": "HeatmapAnswerOutput",
    "HeatmapCellDetail": "HeatmapCellDetailOutput",
    "Experiment": "ExperimentOutput",
    "ExperimentRun": "ExperimentRunOutput",
    "SeedsNeeded": "SeedsNeededOutput",
    "VerdictComparison": "VerdictComparisonOutput",
    "RewardCurve": "RewardCurveOutput",
    "BenchmarkResult": "BenchmarkResultOutput",
    "ArmResult": "ArmResultOutput",
    "MachineGroup": "MachineGroupOutput",
    "ExperimentEstimate": "ExperimentEstimateOutput",
    "RunDuration": "RunDurationOutput",
    "EstimateError": "EstimateErrorOutput",
    "ExperimentTiming": "ExperimentTimingOutput",
    "MissingRun": "MissingRunOutput",
    "ExperimentResults": "ExperimentResultsOutput",
    "ExperimentDetail": "ExperimentDetailOutput",
    "ExperimentLeakage": "ExperimentLeakageOutput",
}
"""Each TypeScript interface and the schema component it stands for."""


def interfaces() -> dict[str, dict[str, bool]]:
    """Per interface its fields (its parent's included), each with whether it is optional."""
    found: dict[str, dict[str, bool]] = {}
    for name, parent, body in INTERFACE.findall(TYPES.read_text()):
        own = {field: optional == "?" for field, optional in PROPERTY.findall(body)}
        found[name] = {**(found[parent] if parent else {}), **own}
    return found


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_every_interface_stands_for_a_schema_component():
    assert set(interfaces()) == set(COMPONENT)


@pytest.mark.parametrize("name", sorted(COMPONENT))
def test_an_interface_has_the_fields_of_its_component(name, components):
    schema = components[COMPONENT[name]]
    required = set(schema.get("required", []))
    expected = {field: field not in required for field in schema["properties"]}
    assert interfaces()[name] == expected
