"""The API reference page, generated from the OpenAPI schema the web app serves (drf-spectacular): every operation
with its method, path, description and answers. `python docs/gen_api.py` prints it."""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any


def openapi_schema() -> dict[str, Any]:
    """The schema as `/api/schema/` serves it, generated in this process (no server, no database)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(48))  # settings would otherwise write one
    os.environ.setdefault("INSPO_STATE_DIR", str(Path(tempfile.gettempdir()) / "inspo-docs-state"))  # not var/
    import django

    django.setup()
    from drf_spectacular.generators import SchemaGenerator

    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return schema


def _cell(text: str) -> str:
    """One table cell: code spans kept as they are, HTML characters and pipes escaped outside them."""
    pieces = re.split(r"(`[^`]*`)", " ".join(text.split()))
    escapes = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|"}
    return "".join(
        piece if piece.startswith("`") else "".join(escapes.get(char, char) for char in piece) for piece in pieces
    )


def _parameters(operation: dict[str, Any], schema: dict[str, Any]) -> str:
    """The query parameters and the JSON body's fields (required ones first) an operation takes."""
    names = [f"`{p['name']}`" for p in operation.get("parameters", []) if p.get("in") == "query"]
    text = f" Query: {', '.join(names)}." if names else ""
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    fields = body.get("properties", {})
    required = set(body.get("required", []))
    if fields:
        ordered = sorted(fields, key=lambda name: name not in required)
        text += " Body: " + ", ".join(f"`{name}`" + ("" if name in required else "?") for name in ordered) + "."
    return text


def api_reference() -> str:
    schema = openapi_schema()
    lines = [
        "# API reference",
        "",
        "<!-- Generated from the web app's OpenAPI schema by docs/gen_api.py at every docs build; never edit. -->",
        "",
        "Every operation of the REST API, generated from the OpenAPI schema the app serves at `/api/schema/`",
        "(Swagger UI at `/api/docs/`, both after sign-in). Authenticate with `Authorization: Token KEY` or the",
        "signed-in session; [the web platform and its API](platform.md) shows them in use with curl. A body field",
        "marked `?` is optional.",
        "",
    ]
    by_section: dict[str, list[str]] = {}
    for path, operations in schema["paths"].items():
        section = path.removeprefix("/api/v1/").split("/", 1)[0] or "api"
        for method, operation in operations.items():
            answers = ", ".join(sorted(operation.get("responses", {})))
            text = _cell((operation.get("description") or "") + _parameters(operation, schema))
            by_section.setdefault(section, []).append(f"| `{method.upper()}` | `{path}` | {text} | {answers} |")
    for section, rows in by_section.items():
        lines += [f"## {section}", "", "| method | path | what it does | answers |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(api_reference())
