"""URLs of runs: the API (mounted at /api/v1/) and the pages (mounted at /)."""

from django.urls import path

from . import apis, views

api_urlpatterns = [
    path("ping/", apis.PingApi.as_view(), name="ping"),
    path("presets/", apis.PresetListApi.as_view(), name="presets"),
    path("compare/", apis.CompareApi.as_view(), name="compare"),
    path("runs/", apis.RunListCreateApi.as_view(), name="runs"),
    path("teams/<slug:slug>/tracking/", apis.TeamTrackingApi.as_view(), name="team-tracking"),
    path("runs/<uuid:run_id>/", apis.RunDetailApi.as_view(), name="run"),
    path("runs/<uuid:run_id>/cancel/", apis.RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<uuid:run_id>/clone/", apis.RunCloneApi.as_view(), name="run-clone"),
    path("runs/<uuid:run_id>/resume/", apis.RunResumeApi.as_view(), name="run-resume"),
    path("runs/<uuid:run_id>/evaluate/", apis.RunEvaluateApi.as_view(), name="run-evaluate"),
    path("runs/<uuid:run_id>/control/", apis.RunControlApi.as_view(), name="run-control"),
    path("runs/<uuid:run_id>/metrics/", apis.RunMetricsApi.as_view(), name="run-metrics"),
    path("runs/<uuid:run_id>/population/", apis.RunPopulationApi.as_view(), name="run-population"),
    path("runs/<uuid:run_id>/diversity/", apis.RunDiversityApi.as_view(), name="run-diversity"),
    path(
        "runs/<uuid:run_id>/alarms/<int:alarm_id>/acknowledge/",
        apis.AlarmAcknowledgeApi.as_view(),
        name="run-alarm-acknowledge",
    ),
    path("runs/<uuid:run_id>/lineage/", apis.RunLineageApi.as_view(), name="run-lineage"),
    path("runs/<uuid:run_id>/evaluations/", apis.RunEvaluationsApi.as_view(), name="run-evaluations"),
    path("runs/<uuid:run_id>/table/", apis.RunTableApi.as_view(), name="run-table"),
    path("runs/<uuid:run_id>/trajectories/", apis.RunTrajectoriesApi.as_view(), name="run-trajectories"),
    path("runs/<uuid:run_id>/checkpoints/", apis.RunCheckpointsApi.as_view(), name="run-checkpoints"),
    path("runs/<uuid:run_id>/heatmaps/", apis.RunHeatmapsApi.as_view(), name="run-heatmaps"),
    path("runs/<uuid:run_id>/heatmaps/<int:heatmap_id>/", apis.RunHeatmapApi.as_view(), name="run-heatmap"),
    path(
        "runs/<uuid:run_id>/heatmaps/<int:heatmap_id>/cells/<int:cell_id>/",
        apis.RunHeatmapCellApi.as_view(),
        name="run-heatmap-cell",
    ),
    path(
        "runs/<uuid:run_id>/checkpoints/<int:checkpoint_id>/archive/",
        apis.CheckpointArchiveApi.as_view(),
        name="run-checkpoint-archive",
    ),
    path("runs/<uuid:run_id>/best-instruction/", apis.BestInstructionApi.as_view(), name="run-best-instruction"),
    path(
        "runs/<uuid:run_id>/best-instruction.txt",
        apis.BestInstructionTextApi.as_view(),
        name="run-best-instruction-text",
    ),
    path("runs/<uuid:run_id>/export/", apis.PopulationExportApi.as_view(), name="run-export"),
]

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("runs/new/", views.run_new, name="new"),
    path("runs/<uuid:run_id>/", views.run_detail, name="detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("runs/<uuid:run_id>/clone/", views.run_clone, name="clone"),
    path("runs/<uuid:run_id>/resume/", views.run_resume, name="resume"),
    path("runs/<uuid:run_id>/evaluate/", views.run_evaluate, name="evaluate"),
    path("runs/<uuid:run_id>/control/", views.run_control, name="control"),
    path("runs/<uuid:run_id>/heatmaps/", views.run_heatmap, name="heatmap"),
    path("runs/<uuid:run_id>/trajectories/", views.run_trajectories, name="trajectories"),
    path("runs/<uuid:run_id>/lineage/", views.run_lineage, name="lineage"),
    path("compare/", views.run_compare, name="compare"),
    path("teams/<slug:slug>/tracking/", views.team_tracking, name="team-tracking"),
]
