"""Sending a file that is already on disk: by the proxy in front (X-Accel-Redirect for nginx, X-Sendfile for Apache
or lighttpd) so no web thread is held while it goes out, or as Django's file response that answers a Range request
with 206 (one range) or 416, so an interrupted download resumes instead of starting over."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse

CHUNK = 1 << 20
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def byte_range(header: str, size: int) -> tuple[int, int] | Literal[False] | None:
    """The one range `header` asks for, as (first, last) byte inclusive; None to send the whole file (no header, a
    malformed one or several ranges: RFC 9110 lets a server ignore them); False when no byte of it exists (416).

    >>> byte_range("bytes=0-99", 1000), byte_range("bytes=900-", 1000), byte_range("bytes=-100", 1000)
    ((0, 99), (900, 999), (900, 999))
    >>> byte_range("bytes=1000-", 1000), byte_range("bytes=0-1,5-9", 1000), byte_range("", 1000)
    (False, None, None)
    """
    match = _RANGE.fullmatch(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # the last N bytes
        suffix = int(last)
        return (max(size - suffix, 0), size - 1) if suffix and size else False
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if last and int(last) < start:
        return None
    return (start, end) if start < size else False


def _slice(path: Path, start: int, length: int) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(start)
        while length > 0:
            chunk = handle.read(min(CHUNK, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def file_response(
    request: HttpRequest,
    path: Path,
    *,
    filename: str,
    content_type: str,
    etag: str = "",
    serve: str = "django",
    root: Path | None = None,
    accel_prefix: str = "/_archives/",
) -> HttpResponseBase:
    """`path` (inside `root` for X-Accel-Redirect) as a download named `filename`. `serve` is who sends the bytes:
    `django`, `x-accel-redirect` (the proxy's internal location `accel_prefix` maps to `root`) or `x-sendfile`."""
    response: HttpResponseBase
    if serve == "x-accel-redirect":
        if root is None:
            raise ValueError("X-Accel-Redirect needs the root its internal location maps to")
        response = HttpResponse(content_type=content_type)
        response["X-Accel-Redirect"] = quote(accel_prefix.rstrip("/") + "/" + path.relative_to(root).as_posix())
    elif serve == "x-sendfile":
        response = HttpResponse(content_type=content_type)
        response["X-Sendfile"] = str(path)
    else:
        response = _django_response(request, path, content_type=content_type, etag=etag)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Accept-Ranges"] = "bytes"
    if etag:
        response["ETag"] = f'"{etag}"'
    return response


def _django_response(request: HttpRequest, path: Path, *, content_type: str, etag: str) -> HttpResponseBase:
    size = path.stat().st_size
    wanted = byte_range(request.headers.get("Range", ""), size)
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range.strip() != f'"{etag}"':
        wanted = None  # the client's partial copy is of another version: send it whole
    if wanted is False:
        refused = HttpResponse(status=416)
        refused["Content-Range"] = f"bytes */{size}"
        return refused
    if wanted is None:
        return FileResponse(path.open("rb"), content_type=content_type)
    start, end = wanted
    partial = StreamingHttpResponse(_slice(path, start, end - start + 1), status=206, content_type=content_type)
    partial["Content-Range"] = f"bytes {start}-{end}/{size}"
    partial["Content-Length"] = str(end - start + 1)
    return partial
