"""Template source that Django would print as text: a `{# #}` comment must open and close on one line (a longer
comment is `{% comment %}`), so no page shows a raw `{#`."""

from __future__ import annotations

import re
from pathlib import Path

WEBAPP = Path(__file__).resolve().parents[2] / "webapp"
UNCLOSED = re.compile(r"\{#(?![^\n]*#\})")


def test_every_one_line_comment_closes_on_its_line():
    templates = sorted(WEBAPP.rglob("templates/**/*.html"))
    assert len(templates) > 10
    unclosed = [
        f"{t.relative_to(WEBAPP)}:{n}"
        for t in templates
        for n, line in enumerate(t.read_text().splitlines(), 1)
        if UNCLOSED.search(line)
    ]
    assert not unclosed, f"a {{# comment spans lines (use {{% comment %}}): {unclosed}"
