"""JSON answers rendered once and then served from Django's cache (Redis in a deployment, so every web process
shares them), each with an ETag, so that a client polling an unchanged answer gets a body-less 304; it knows
nothing about what the data is or when it changes — the caller's key says that."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils.http import parse_etags
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

CACHED_JSON_S = 7 * 24 * 3600
"""How long an entry lives; keys name a version of the data, so this only bounds the space stale versions take."""

_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS
_FALLBACK = JSONEncoder()


def json_bytes(data: Any) -> bytes:
    """`data` as JSON, as DRF's renderer writes it (a UTC time ends in Z; a Decimal, a lazy string or anything else
    orjson does not know goes through DRF's encoder), in C: encoding 6,000 floats takes 0.2 ms instead of 3. NaN and
    infinities are written null, where DRF's strict renderer would raise. What orjson refuses outright (an integer
    beyond 64 bits, nesting past 254 levels) is rendered by DRF's renderer instead."""
    try:
        return orjson.dumps(data, default=_FALLBACK.default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return bytes(JSONRenderer().render(data))


class FastJSONRenderer(JSONRenderer):
    """The API's renderer: DRF's JSONRenderer with the encoding done by `json_bytes`."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return b"" if data is None else json_bytes(data)


def _etag(material: bytes) -> str:
    return '"' + hashlib.blake2b(material, digest_size=16).hexdigest() + '"'


def _not_modified(request: HttpRequest, etag: str) -> bool:
    wanted = parse_etags(request.headers.get("If-None-Match", ""))
    return etag in wanted or "*" in wanted


def cached_json(
    request: HttpRequest, key: str | None, build: Callable[[], Any], *, timeout: int = CACHED_JSON_S
) -> HttpResponse:
    """`build()` rendered as JSON (`json_bytes`), with an ETag. With a key (a version of data that no longer changes)
    the ETag is the key's digest, so a matching If-None-Match is answered 304 before anything is read, and the bytes
    are cached, so later calls skip both the build and the rendering. Without one (data still changing) it is built
    every time and the ETag is the body's digest: a 304 then saves the transfer and the client's parsing."""
    if key is not None:
        etag = _etag(key.encode())
        if _not_modified(request, etag):
            return _with_etag(HttpResponseNotModified(), etag)
        body = cache.get(key)
        if body is None:
            body = json_bytes(build())
            cache.set(key, body, timeout)
    else:
        body = json_bytes(build())
        etag = _etag(body)
        if _not_modified(request, etag):
            return _with_etag(HttpResponseNotModified(), etag)
    return _with_etag(HttpResponse(body, content_type="application/json"), etag)


def _with_etag(response: HttpResponse, etag: str) -> HttpResponse:
    response["ETag"] = etag
    # The browser may keep the answer but must ask before each use; If-None-Match then makes that ask cheap.
    response["Cache-Control"] = "private, no-cache"
    return response
