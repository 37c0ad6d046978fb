"""URLs of data: the API (mounted at /api/v1/) and the Data page (mounted at /data/)."""

from django.urls import path

from . import apis, leakage_apis, reach_apis, staging_apis, staging_views, views

api_urlpatterns = [
    path("datasets/", apis.DatasetListCreateApi.as_view(), name="datasets"),
    path("datasets/<int:dataset_id>/", apis.DatasetDetailApi.as_view(), name="dataset"),
    path("datasets/preview/", staging_apis.UploadPreviewApi.as_view(), name="dataset-preview"),
    path("datasets/staged/<uuid:staged_id>/", staging_apis.StagedUploadApi.as_view(), name="dataset-staged"),
    path("datasets/staged/<uuid:staged_id>/confirm/", staging_apis.StagedConfirmApi.as_view(), name="staged-confirm"),
    path("datasets/<int:dataset_id>/index/", apis.DatasetIndexApi.as_view(), name="dataset-index"),
    path("datasets/<int:dataset_id>/leakage/", leakage_apis.DatasetLeakageApi.as_view(), name="dataset-leakage"),
    path("runs/<uuid:run_id>/leakage/", leakage_apis.RunLeakageApi.as_view(), name="run-leakage"),
    path("index-jobs/<int:job_id>/", apis.IndexJobApi.as_view(), name="index-job"),
    path("retrieval/", apis.RetrievalStatusApi.as_view(), name="retrieval"),
    path("index-jobs/<int:job_id>/cancel/", apis.IndexJobCancelApi.as_view(), name="index-job-cancel"),
    path("reach-checks/", reach_apis.ReachCheckListApi.as_view(), name="reach-checks"),
    path("reach-checks/<int:check_id>/", reach_apis.ReachCheckApi.as_view(), name="reach-check"),
    path("reach-checks/<int:check_id>/cancel/", reach_apis.ReachCheckCancelApi.as_view(), name="reach-check-cancel"),
]

app_name = "data"
urlpatterns = [
    path("", views.data_list, name="list"),
    path("<int:dataset_id>/", views.data_detail, name="detail"),
    path("preview/", staging_views.upload_preview, name="preview"),
    path("preview/<uuid:staged_id>/", staging_views.staged_page, name="staged"),
]
