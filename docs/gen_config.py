"""The configuration reference page, generated from `RunConfig`'s fields: path, type, default, bound, docstring.

Field docstrings are the string literals written after each field in the source (attribute docstrings), read
with `ast`; everything else comes from the dataclasses themselves, so the page follows the code. Run it to print
the page: `python docs/gen_config.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import json
import re
import textwrap
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

from inspo_engine import config as config_module
from inspo_engine.config import RunConfig, field_paths
from inspo_engine.config_fields import BOUNDS

DOCS = Path(__file__).resolve().parent
LONG_DEFAULT = 60
"""A default longer than this (as JSON) is shown cut, with its length."""


@cache
def attribute_docstrings(cls: type) -> dict[str, str]:
    """{field name: the string literal that follows its annotated assignment} in `cls`'s own source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        literal = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        text = following.value.value if literal else None  # type: ignore[attr-defined]
        if isinstance(text, str):
            docs[node.target.id] = inspect.cleandoc(text)
    return docs


def type_name(hint: Any) -> str:
    """A field's type as a reader writes it: `int`, `str | None`, `'torch' | 'verl'`, `list[str]`."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " | ".join(json.dumps(value) for value in typing.get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return " | ".join("None" if arg is type(None) else type_name(arg) for arg in typing.get_args(hint))
    if origin is list:
        return f"list[{', '.join(type_name(arg) for arg in typing.get_args(hint))}]"
    return getattr(hint, "__name__", str(hint))


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def default_text(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > LONG_DEFAULT:
        return f"`{_code(text[:LONG_DEFAULT])}…` ({len(text)} characters)"
    return f"`{_code(text)}`"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def bound_text(path: str, field: dataclasses.Field[Any], hint: Any) -> str:
    """The range `RunConfig.validate` enforces on the field, and the length limits of strings and lists."""
    parts = []
    bounds = field.metadata.get(BOUNDS)
    if bounds is not None:
        if bounds.low is not None:
            parts.append(f"{'≥' if bounds.inclusive else '>'} {_number(bounds.low)}")
        if bounds.high is not None:
            parts.append(f"≤ {_number(bounds.high)}")
    most_items = getattr(config_module, "MAX_LIST_ITEMS", {}).get(path)
    if most_items is not None:
        parts.append(f"≤ {most_items} items")
    if hint is str or str in typing.get_args(hint):  # a str, an optional str, or a list of str
        instruction_fields = getattr(config_module, "_INSTRUCTION_FIELDS", ())
        most = getattr(config_module, "MAX_INSTRUCTION_CHARS" if path in instruction_fields else "MAX_STRING_CHARS", 0)
        if most:
            parts.append(f"≤ {most:,} characters, no `$`")
    return ", ".join(parts) or "–"


def _code(text: str) -> str:
    """Text inside a code span (where Python-Markdown's tables keep a pipe): a backtick would end the span."""
    return text.replace("`", "'")


def markdown_text(text: str) -> str:
    """A docstring as one table cell: one line, code spans kept, HTML and emphasis characters escaped outside."""
    pieces = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for piece in pieces:
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(f"`{_code(piece[1:-1])}`")
        else:
            escaped = piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            out.append(_link_pages(re.sub(r"([|*_\[\]\\])", r"\\\1", escaped)))
    return "".join(out)


def _link_pages(text: str) -> str:
    """'docs/losses.md' in a docstring becomes a link to that page, where the page exists."""

    def link(match: re.Match[str]) -> str:
        page = match.group(1).replace("\\_", "_")
        return f"[docs/{match.group(1)}]({page})" if (DOCS / page).is_file() else match.group(0)

    return re.sub(r"docs/([\w\\/.-]+?\.md)", link, text)


def _field_table(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    docs = attribute_docstrings(cls)
    lines = ["| field | type | default | bound | what it is |", "|---|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            continue
        path = prefix + field.name
        lines.append(
            f'| <a id="{path}"></a>`{path}` | `{_code(type_name(hint))}` | {default_text(default_of(field))} '
            f"| {bound_text(path, field, hint)} | {markdown_text(docs.get(field.name, ''))} |"
        )
    return lines


def _sections() -> list[tuple[str, type]]:
    """("", RunConfig) for the top-level fields, then (name, class) of every section in field order."""
    hints = typing.get_type_hints(RunConfig)
    sections: list[tuple[str, type]] = [("", RunConfig)]
    for field in dataclasses.fields(RunConfig):
        hint = hints[field.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            sections.append((field.name, hint))
    return sections


def _paper_names() -> list[str]:
    names: dict[str, str] = getattr(config_module, "INSPO_FIELDS", {})
    if not names:
        return []
    pairs = ", ".join(f"`{name}` ([{path}](#{path}))" for name, path in names.items())
    return [f"The paper's names for INSPO's knobs may be used bare in `--set` and in overrides: {pairs}.", ""]


def _presets() -> list[str]:
    """A table of what each preset changes from the defaults, read from the presets themselves."""
    try:
        module = importlib.import_module("inspo_engine.presets")
    except ImportError:
        module = config_module
    names = list(getattr(module, "PRESETS", {}))
    make = getattr(module, "preset", None)
    if not names or make is None:
        return []
    value = config_module.field_value
    default, configs = RunConfig(), [make(name) for name in names]
    lines = [
        "## Presets",
        "",
        "What each preset changes from the defaults above (· = the default; `config show --preset NAME` prints one",
        "in full):",
        "",
        f"| field | {' | '.join(names)} |",
        f"|---|{'---|' * len(names)}",
    ]
    for path in field_paths():
        values = [value(config, path) for config in configs]
        if any(v != value(default, path) for v in values):
            cells = [default_text(v) if v != value(default, path) else "·" for v in values]
            lines.append(f"| [`{path}`](#{path}) | {' | '.join(cells)} |")
    return [*lines, ""]


def config_reference() -> str:
    """The whole page, as Markdown."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from inspo_engine/config.py by docs/gen_config.py at every docs build; never edit. -->",
        "",
        "`RunConfig` (`inspo_engine/config.py`) is the one source of truth for defaults and bounds: the command line,",
        "the web form and the API all validate with it, and a value outside a field's bound is refused with a",
        "message that names the field and the bound. This page is generated from its fields at every docs build.",
        'Override a field by its dotted path (`--set grpo.lr=1e-6` on the command line, `"overrides":',
        '{"grpo.lr": 1e-6}` in the API); a bare leaf name works where it names exactly one field.',
        "`python -m inspo_engine config fields` prints every path, `config show --preset NAME` a preset in full.",
        "",
        *_paper_names(),
    ]
    for name, cls in _sections():
        title = name or "Top-level fields"
        lines += [f"## {title}", ""]
        doc = inspect.getdoc(cls) or ""
        if doc and name:
            lines += [markdown_text(doc), ""]
        lines += [*_field_table(cls, f"{name}." if name else ""), ""]
    lines += _presets()
    lines += [
        "`RunConfig.validate` checks every bound above and the relations between fields (for example",
        "`n_parents` ≤ `population_size`, `evolve_until` ≤ `total_steps`, micro ≤ mini ≤ batch size), and names",
        "every bad field at once.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(config_reference())
