"""REST API for runs under /api/v1/, one module per resource: `runs` (list, submit, one run's data), `control`
(actions and steering), `heatmaps`, `downloads`, `compare`, `teams` (default trackers) and `presets`. Each view
validates with a serializer, calls one service or selector, and serialises the result with an output serializer of
`outputs`. Team scoping lives in `selectors.run_get` (404 for other teams) and roles in services. Every operation
documents the errors it answers (`error_responses`)."""

from .compare import CompareApi
from .control import (
    AlarmAcknowledgeApi,
    RunCancelApi,
    RunCloneApi,
    RunControlApi,
    RunEvaluateApi,
    RunResumeApi,
)
from .downloads import BestInstructionApi, BestInstructionTextApi, CheckpointArchiveApi, PopulationExportApi
from .heatmaps import RunHeatmapApi, RunHeatmapCellApi, RunHeatmapsApi
from .presets import PingApi, PresetListApi
from .runs import (
    RunCheckpointsApi,
    RunDetailApi,
    RunDiversityApi,
    RunEvaluationsApi,
    RunLineageApi,
    RunListCreateApi,
    RunMetricsApi,
    RunPopulationApi,
    RunTableApi,
    RunTrajectoriesApi,
)
from .teams import TeamTrackingApi

__all__ = [
    "AlarmAcknowledgeApi",
    "BestInstructionApi",
    "BestInstructionTextApi",
    "CheckpointArchiveApi",
    "CompareApi",
    "PingApi",
    "PopulationExportApi",
    "PresetListApi",
    "RunCancelApi",
    "RunCheckpointsApi",
    "RunCloneApi",
    "RunControlApi",
    "RunDetailApi",
    "RunDiversityApi",
    "RunEvaluateApi",
    "RunEvaluationsApi",
    "RunHeatmapApi",
    "RunHeatmapCellApi",
    "RunHeatmapsApi",
    "RunLineageApi",
    "RunListCreateApi",
    "RunMetricsApi",
    "RunPopulationApi",
    "RunResumeApi",
    "RunTableApi",
    "RunTrajectoriesApi",
    "TeamTrackingApi",
]
