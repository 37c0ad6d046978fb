"""The settings reference page, generated from `webapp/config/settings.py`: every environment variable it reads,
with its default as written there and the docstring under the setting. `python docs/gen_settings.py` prints it."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from pathlib import Path

SETTINGS = Path(__file__).resolve().parent.parent / "webapp" / "config" / "settings.py"


def _variable(call: ast.Call) -> str | None:
    """The variable's name when `call` reads one: env_*("NAME", …) or os.environ.get("NAME", …)."""
    func = call.func
    reads = (isinstance(func, ast.Name) and func.id.startswith("env_")) or (
        isinstance(func, ast.Attribute) and func.attr == "get" and ast.unparse(func.value) == "os.environ"
    )
    first = call.args[0] if call.args else None
    if reads and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _default(call: ast.Call) -> str:
    parts = [ast.unparse(arg) for arg in call.args[1:2]]
    parts += [f"{kw.arg} {ast.unparse(kw.value)}" for kw in call.keywords if kw.arg == "minimum"]
    return ", ".join(parts) or "(none)"


def settings_rows(source: str) -> list[tuple[str, str, str]]:
    """(variable, default as written, docstring of the statement that reads it), in the order settings.py reads them."""
    body = ast.parse(source).body
    rows: dict[str, tuple[str, str, str]] = {}
    for statement, following in itertools.pairwise([*body, ast.Pass()]):
        literal = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        doc = following.value.value if literal else ""  # type: ignore[attr-defined]
        doc = inspect.cleandoc(doc) if isinstance(doc, str) else ""
        if isinstance(statement, ast.FunctionDef):
            doc = ast.get_docstring(statement) or ""
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and (name := _variable(node)) and name not in rows:
                rows[name] = (name, _default(node), doc)
    return list(rows.values())


def _cell(text: str) -> str:
    pieces = re.split(r"(`[^`]*`)", " ".join(text.split()))
    escapes = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "*": "\\*", "_": "\\_"}
    return "".join(
        piece if piece.startswith("`") else "".join(escapes.get(char, char) for char in piece) for piece in pieces
    )


def settings_reference() -> str:
    lines = [
        "# Settings reference",
        "",
        "<!-- Generated from webapp/config/settings.py by docs/gen_settings.py at every docs build; never edit. -->",
        "",
        "Every environment variable the web app and its workers read, in the order `webapp/config/settings.py` reads",
        "them, with the default as written there and what the setting is for. A bad value stops the process at start",
        "with a message that names the variable. [The security model](security.md) explains the ones that guard",
        "teams from each other; [the run lifecycle](architecture.md#run-lifecycle) the ones that time workers.",
        "",
        "| variable | default (as written) | what it is |",
        "|---|---|---|",
    ]
    for name, default, doc in settings_rows(SETTINGS.read_text(encoding="utf-8")):
        written = default.replace("`", "'")
        lines.append(f"| `{name}` | `{written}` | {_cell(doc)} |")
    return "\n".join([*lines, ""])


if __name__ == "__main__":
    print(settings_reference())
