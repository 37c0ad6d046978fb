"""The module map page, generated from the code: every module of the engine, the web app and the workers with the
first line of its docstring (each module opens with one that says what it owns). `python docs/gen_modules.py`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "inspo_engine": "The engine: a plain library, no web framework.",
    "webapp": "The web platform: Django apps and their config.",
    "workers": "The Celery side: tasks that run the engine for the web app.",
}


def opening_line(path: Path) -> str:
    """The first line of a module's docstring, or '' where it has none."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ") if doc else ""


def _cell(text: str) -> str:
    """One table cell: code spans kept as they are, HTML characters and pipes escaped outside them."""
    pieces = re.split(r"(`[^`]*`)", text)
    escapes = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|"}
    return "".join(
        piece if piece.startswith("`") else "".join(escapes.get(char, char) for char in piece) for piece in pieces
    )


def modules_reference() -> str:
    lines = [
        "# Module map",
        "",
        "<!-- Generated from the modules' docstrings by docs/gen_modules.py at every docs build; never edit. -->",
        "",
        "Every module with the opening line of its docstring, read from the code at every docs build.",
        "[Architecture](architecture.md) shows how the rooms depend on each other.",
        "",
    ]
    for package, about in PACKAGES.items():
        lines += [f"## {package}", "", about, "", "| module | what it owns |", "|---|---|"]
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts or (path.name == "__init__.py" and not opening_line(path)):
                continue
            lines.append(f"| `{relative.as_posix()}` | {_cell(opening_line(path))} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(modules_reference())
