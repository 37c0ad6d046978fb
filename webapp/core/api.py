"""The API's error format: DRF's for validation and auth, plus service errors mapped to their status codes."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import InvalidInput, ServiceError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, InvalidInput):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, ServiceError):
        return Response({"detail": exc.message}, status=exc.status)
    if isinstance(exc, DjangoValidationError):
        body = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        return Response(body, status=400)
    return drf_exception_handler(exc, context)
