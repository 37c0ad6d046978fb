"""JSON answers rendered once and then served from Django's cache (Redis in a deployment, so every web process
shares them); it knows nothing about what the data is or when it changes — the caller's key says that."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

CACHED_JSON_S = 7 * 24 * 3600
"""How long an entry lives; keys name a version of the data, so this only bounds the space stale versions take."""


def cached_json(key: str | None, build: Callable[[], Any], *, timeout: int = CACHED_JSON_S) -> HttpResponse:
    """`build()` rendered as the API renders JSON. With a key the bytes are cached and later calls skip both the
    build and the rendering; without one (data still changing) it is built every time."""
    body = cache.get(key) if key is not None else None
    if body is None:
        body = JSONRenderer().render(build())
        if key is not None:
            cache.set(key, body, timeout)
    return HttpResponse(body, content_type="application/json")
