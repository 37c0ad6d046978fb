"""URLs of data: the API (mounted at /api/v1/) and the Data page (mounted at /data/)."""

from django.urls import path

from . import apis, views

api_urlpatterns = [
    path("datasets/", apis.DatasetListCreateApi.as_view(), name="datasets"),
    path("datasets/<int:dataset_id>/", apis.DatasetDetailApi.as_view(), name="dataset"),
    path("datasets/<int:dataset_id>/index/", apis.DatasetIndexApi.as_view(), name="dataset-index"),
    path("index-jobs/<int:job_id>/", apis.IndexJobApi.as_view(), name="index-job"),
    path("retrieval/", apis.RetrievalStatusApi.as_view(), name="retrieval"),
    path("index-jobs/<int:job_id>/cancel/", apis.IndexJobCancelApi.as_view(), name="index-job-cancel"),
]

app_name = "data"
urlpatterns = [
    path("", views.data_list, name="list"),
    path("<int:dataset_id>/", views.data_detail, name="detail"),
]
