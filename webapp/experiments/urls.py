"""URLs of experiments: the API (mounted at /api/v1/) and the pages (mounted at /experiments/)."""

from django.urls import path

from . import apis, views

api_urlpatterns = [
    path("experiments/", apis.ExperimentListCreateApi.as_view(), name="experiments"),
    path("experiments/estimate/", apis.ExperimentEstimateApi.as_view(), name="experiment-estimate"),
    path("experiments/<int:experiment_id>/", apis.ExperimentDetailApi.as_view(), name="experiment"),
    path("experiments/<int:experiment_id>/cancel/", apis.ExperimentCancelApi.as_view(), name="experiment-cancel"),
]

app_name = "experiments"
urlpatterns = [
    path("", views.experiment_list, name="list"),
    path("new/", views.experiment_new, name="new"),
    path("<int:experiment_id>/", views.experiment_detail, name="detail"),
    path("<int:experiment_id>/cancel/", views.experiment_cancel, name="cancel"),
]
