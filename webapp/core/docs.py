"""The API docs page (Swagger UI, drawn from the schema): a page for people, so someone signed out is sent to sign in
and back rather than shown a bare 401; a token client still gets the page."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated


class SwaggerPage(SpectacularSwaggerSplitView):
    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, NotAuthenticated | AuthenticationFailed) and self.request.method in ("GET", "HEAD"):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)
