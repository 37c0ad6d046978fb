"""The site's URL map: pages at / (experiments' at /experiments/, data's at /data/), accounts at /accounts/, the
API at /api/v1/, its schema and docs, the documentation site at /docs/, admin; error views that answer JSON under
/api/."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from webapp.accounts.urls import api_urlpatterns as accounts_api
from webapp.core.docs import SwaggerPage, docs_page
from webapp.data.urls import api_urlpatterns as data_api
from webapp.experiments.urls import api_urlpatterns as experiments_api
from webapp.runs.urls import api_urlpatterns as runs_api

api_v1 = ([*runs_api, *experiments_api, *data_api, *accounts_api], "api")

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("webapp.accounts.urls")),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI from the sidecar package's static files; its start script is a file too (no inline script). A page
    # for people: signed out, it sends them to sign in and back.
    path("api/docs/", SwaggerPage.as_view(url_name="schema"), name="swagger-ui"),
    # The built documentation site (settings.INSPO_DOCS_DIR), public: /docs/ and any file below it.
    re_path(r"^docs/(?P<path>.*)$", docs_page, name="docs"),
    path("experiments/", include("webapp.experiments.urls")),
    path("data/", include("webapp.data.urls")),
    path("", include("webapp.runs.urls")),
]

handler400 = "webapp.core.api.bad_request"
handler403 = "webapp.core.api.permission_denied"
handler404 = "webapp.core.api.page_not_found"
handler500 = "webapp.core.api.server_error"
