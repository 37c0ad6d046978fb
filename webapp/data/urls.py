"""URLs of data: the API (mounted at /api/v1/) and the Data page (mounted at /data/)."""

from django.urls import path

from . import apis, reach_apis, views

api_urlpatterns = [
    path("datasets/", apis.DatasetListCreateApi.as_view(), name="datasets"),
    path("datasets/<int:dataset_id>/", apis.DatasetDetailApi.as_view(), name="dataset"),
    path("datasets/<int:dataset_id>/index/", apis.DatasetIndexApi.as_view(), name="dataset-index"),
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
]
