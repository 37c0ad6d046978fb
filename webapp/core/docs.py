"""The documentation pages: the API docs (Swagger UI, drawn from the schema), a page for people, so someone signed
out is sent to sign in and back rather than shown a bare 401 (a token client still gets the page); and the built
documentation site (settings.INSPO_DOCS_DIR, `make docs`) at /docs/, public, since it holds nothing a team owns."""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated


class SwaggerPage(SpectacularSwaggerSplitView):
    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, NotAuthenticated | AuthenticationFailed) and self.request.method in ("GET", "HEAD"):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)


# -- the documentation site at /docs/ ----------------------------------------------------------------------------

_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\ssrc=)[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)
_TEXT_TYPES = ("text/", "application/javascript", "application/json", "application/xml", "image/svg+xml")


def docs_file(root: Path, path: str) -> Path | None:
    """The file or folder `path` (a URL path below /docs/, already percent-decoded) names inside `root`; None when it
    does not exist, climbs out (a `..` or `.` segment, a backslash, a NUL) or leads out of `root` through a link."""
    parts = path.split("/")
    if any(part in (".", "..") or "\\" in part or "\x00" in part for part in parts):
        return None
    real_root = root.resolve()
    try:
        real = root.joinpath(*[part for part in parts if part]).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a link loop, a name too long
        return None
    return real if real.is_relative_to(real_root) else None


def _policy_with_scripts(policy: str, html: str) -> str:
    """The site's Content-Security-Policy with the page's own inline scripts (mkdocs-material's theme switch and
    storage helpers) allowed by their SHA-256 hashes in script-src, and nothing else added."""
    hashes = sorted(
        {
            "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii") + "'"
            for body in _INLINE_SCRIPT.findall(html)
        }
    )
    if not policy or not hashes:
        return policy
    directives = [directive.strip() for directive in policy.split(";") if directive.strip()]
    names = [directive.split()[0].lower() for directive in directives]
    if "script-src" in names:
        index = names.index("script-src")
        directives[index] = " ".join([directives[index], *hashes])
    else:
        fallback = directives[names.index("default-src")].split()[1:] if "default-src" in names else []
        directives.append(" ".join(["script-src", *fallback, *hashes]))
    return "; ".join(directives)


def _content_type(path: Path) -> str:
    guessed, encoding = mimetypes.guess_type(path.name)
    if encoding is not None:  # sitemap.xml.gz is a gzip file, not XML sent compressed
        return {"gzip": "application/gzip", "bzip2": "application/x-bzip2"}.get(encoding, "application/octet-stream")
    if guessed is None:
        return "application/octet-stream"
    return f"{guessed}; charset=utf-8" if guessed.startswith(_TEXT_TYPES) else guessed


def docs_page(request: HttpRequest, path: str = "") -> HttpResponseBase:
    """A file of the built documentation site; a folder serves its index.html (`/docs/x` redirects to `/docs/x/` so
    the page's relative links resolve). Not built: 404 with a page that says how to build it."""
    root = Path(settings.INSPO_DOCS_DIR)
    if not (root / "index.html").is_file():
        return render(request, "docs_missing.html", status=404)
    found = docs_file(root, path)
    if found is None:
        raise Http404("no such page in the documentation")
    if found.is_dir():
        if path and not path.endswith("/"):
            return HttpResponseRedirect(request.path + "/")
        found = found / "index.html"
        if not found.is_file():
            raise Http404("no such page in the documentation")
    content_type = _content_type(found)
    if not content_type.startswith("text/html"):
        return FileResponse(found.open("rb"), content_type=content_type)
    html = found.read_text(encoding="utf-8", errors="replace")
    response = HttpResponse(html, content_type=content_type)
    policy = _policy_with_scripts(settings.CONTENT_SECURITY_POLICY, html)
    if policy:
        response["Content-Security-Policy"] = policy
    return response
