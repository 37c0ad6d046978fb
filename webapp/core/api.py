"""The API's error format: every error under /api/ is JSON with a `detail` message — DRF's for validation and
auth, service errors mapped to their status codes, and JSON pages for what happens outside a view (no route,
a crash); a JSON body too large or nested too deeply is a 4xx that says so. `error_responses` documents them in the
OpenAPI schema. Also the pieces every app's API shares: the JSON fields of configs and the paginator."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.views import defaults
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import InvalidInput, ServiceError
from .text import has_nul, json_depth

MAX_JSON_DEPTH = 32
"""The deepest nesting of arrays and objects a JSON body may have (a run config needs about five levels)."""
API_PREFIX = "/api/"

logger = logging.getLogger(__name__)


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, refusing (400) a body nested more than MAX_JSON_DEPTH levels instead of crashing on it.
    Its size is bounded before it is parsed: DATA_UPLOAD_MAX_MEMORY_SIZE (413, see `exception_handler`)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        too_deep = ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if json_depth(data) > MAX_JSON_DEPTH:
            raise too_deep
        return data


def query_once(params: QueryDict, *, many: Collection[str] = ()) -> dict[str, Any]:
    """The query parameters (a QueryDict) one value each, for an input serializer; a 400 naming every parameter
    given more than once that takes one value (those in `many` take several)."""
    repeated = sorted(name for name in params if name not in many and len(params.getlist(name)) > 1)
    if repeated:
        raise ValidationError({name: ["give this parameter once"] for name in repeated})
    return {name: params.getlist(name) if name in many else params[name] for name in params}


# -- fields and pages every app's API shares --------------------------------------------------------------------


class JsonValueField(serializers.JSONField):
    """Any JSON value the engine reads itself (an experiment's arms, seeds); NUL characters refused."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if has_nul(value):
            raise serializers.ValidationError("NUL characters are not allowed")
        return value


class ConfigField(serializers.JSONField):
    """A JSON object (a partial engine config or overrides); the engine checks what is inside."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object")
        if has_nul(value):
            raise serializers.ValidationError("NUL characters are not allowed")
        return value


class PagePagination(PageNumberPagination):
    """A list a page at a time (runs, experiments): 20 to a page, `page_size` up to 200."""

    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 200

    class Input(serializers.Serializer[Any]):
        """The paginator's own parameters, checked first: it would read a bad value as the default."""

        page = serializers.IntegerField(required=False, min_value=1, help_text="Default 1; past the last: 404.")
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=200, help_text="Default 20.")

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """DRF's envelope, each of its four fields always sent (`next` and `previous` null at either end)."""
        envelope = super().get_paginated_response_schema(schema)
        return {**envelope, "required": ["count", "next", "previous", "results"]}


# -- the errors in the schema -----------------------------------------------------------------------------------


class ErrorOutputSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField(help_text="What went wrong, in a sentence.")


ERROR_MEANINGS = {
    400: "Invalid input: each field with its messages ({field: [message, …]}; a config's fields under `config`, by "
    "dotted path), or `detail` for a body that is no JSON object.",
    401: "Not signed in: no valid API token (Authorization: Token …) or session.",
    403: "Your role in the run's team does not allow it: viewers read, members submit and act.",
    404: "No such object among your teams' (another team's run reads the same as one that does not exist), or no "
    "such page.",
    409: "The object's state does not allow it; `detail` says what state it is in.",
    410: "The object's files are gone (an old checkpoint its run deleted).",
    413: "The request body is larger than the server accepts.",
    416: "The Range asked for lies outside the file; Content-Range gives its size.",
    429: "Too many requests: the API's rate limit, or a team quota (active runs); `detail` says which.",
    503: "A service the platform runs beside the web app (the retrieval service) does not answer.",
}
ALWAYS = (401, 429)
"""What any operation may answer: every one needs a signed-in caller and counts against the rate limit."""


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The schema's responses for these error statuses and those in ALWAYS, each with its body and meaning."""
    responses = {}
    for status in sorted({*statuses, *ALWAYS}):
        body: Any = ErrorOutputSerializer
        if status == 400:
            body = OpenApiTypes.OBJECT
        elif status == 416:
            body = None
        responses[status] = OpenApiResponse(response=body, description=ERROR_MEANINGS[status])
    return responses


def _too_big_message() -> str:
    return f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, InvalidInput):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, ServiceError):
        return Response({"detail": exc.message}, status=exc.status)
    if isinstance(exc, DjangoValidationError):
        body = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        return Response(body, status=400)
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": _too_big_message()}, status=413)
    if isinstance(exc, SuspiciousOperation):
        logger.warning("refused an API request: %s", exc)
        return Response({"detail": "the request was refused as malformed"}, status=400)
    return drf_exception_handler(exc, context)


# -- the site's error views (handler400/403/404/500): JSON under /api/, Django's pages elsewhere ----------------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse({"detail": _too_big_message()}, status=413)
    return JsonResponse({"detail": "the request was refused as malformed"}, status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return JsonResponse({"detail": "You do not have permission to perform this action."}, status=403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return JsonResponse({"detail": f"no such API resource: {request.path}"}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if not _is_api(request):
        return defaults.server_error(request)
    return JsonResponse({"detail": "internal error; the operators have the details in the server log"}, status=500)
