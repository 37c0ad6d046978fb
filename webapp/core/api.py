"""The API's error format: every error under /api/ is JSON with a `detail` message — DRF's for validation and
auth, service errors mapped to their status codes, and JSON pages for what happens outside a view (no route,
a crash); a JSON body too large or nested too deeply is a 4xx that says so."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import InvalidInput, ServiceError

MAX_JSON_DEPTH = 32
"""The deepest nesting of arrays and objects a JSON body may have (a run config needs about five levels)."""
API_PREFIX = "/api/"

logger = logging.getLogger(__name__)


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value`, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, refusing (400) a body nested more than MAX_JSON_DEPTH levels instead of crashing on it.
    Its size is bounded before it is parsed: DATA_UPLOAD_MAX_MEMORY_SIZE (413, see `exception_handler`)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        too_deep = ParseError(f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if _depth(data) > MAX_JSON_DEPTH:
            raise too_deep
        return data


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
