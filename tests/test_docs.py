"""The documentation: the generated configuration reference names every field, the README stays a front page,
every relative link points at a file, and the site builds with mkdocs --strict."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from inspo_engine.config import RunConfig, field_paths

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _docs_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative_links(markdown: Path) -> list[str]:
    """The targets of the file's Markdown links and images that are neither URLs nor anchors on the same page."""
    text = FENCE.sub("", markdown.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = [match.group(1) for match in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_configuration_page_lists_every_field_path() -> None:
    page = _docs_module("gen_config").config_reference()

    missing = [path for path in field_paths() if f'| <a id="{path}"></a>`{path}` |' not in page]

    assert not missing, f"fields absent from the configuration reference: {missing}"


def test_the_configuration_page_gives_each_field_its_docstring_and_bound() -> None:
    gen = _docs_module("gen_config")
    page = gen.config_reference()

    row = next(line for line in page.splitlines() if line.startswith('| <a id="grpo.group_size"></a>'))
    documented = gen.attribute_docstrings(type(RunConfig().grpo))

    assert "≥ 2, ≤ 64" in row
    assert "`5`" in row
    assert gen.markdown_text(documented["group_size"]) in row


@pytest.mark.slow
def test_every_field_has_a_docstring_for_the_reference() -> None:
    gen = _docs_module("gen_config")
    undocumented = []

    def walk(cls: type, prefix: str) -> None:
        docs = gen.attribute_docstrings(cls)
        for field in dataclasses.fields(cls):
            value = getattr(cls(), field.name)
            if dataclasses.is_dataclass(value):
                walk(type(value), f"{prefix}{field.name}.")
            elif not docs.get(field.name):
                undocumented.append(prefix + field.name)

    walk(RunConfig, "")

    assert not undocumented, f"config fields without a docstring under them: {undocumented}"


def test_the_settings_page_lists_every_variable_settings_py_reads() -> None:
    settings = (ROOT / "webapp" / "config" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r"(?:env_\w+|os\.environ\.get)\(\s*\"([A-Z][A-Z0-9_]+)\"", settings))
    page = _docs_module("gen_settings").settings_reference()

    assert "INSPO_TEAM_MAX_ACTIVE_RUNS" in read
    assert not [name for name in read if f"| `{name}` |" not in page]


def test_the_readme_is_a_front_page_of_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()

    assert len(lines) <= 200, f"README.md has {len(lines)} lines"


def test_every_relative_link_of_the_readme_and_the_docs_points_to_a_file() -> None:
    generated = set(_docs_module("hooks").GENERATED)
    broken = []
    for markdown in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for target in _relative_links(markdown):
            path = target.split("#", 1)[0]
            resolved = (markdown.parent / path).resolve()
            page = resolved.relative_to(DOCS.resolve()).as_posix() if resolved.is_relative_to(DOCS.resolve()) else ""
            if path and not resolved.exists() and page not in generated:
                broken.append(f"{markdown.relative_to(ROOT)} → {target}")

    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def _slugs(markdown: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and Python-Markdown's toc both make them for ASCII titles."""
    text = FENCE.sub("", markdown.read_text(encoding="utf-8"))
    titles = re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE)
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.lower()).strip()) for title in titles}


def test_every_anchor_the_readme_links_to_is_a_heading() -> None:
    readme = ROOT / "README.md"
    missing = []
    for target in _relative_links(readme):
        path, _, anchor = target.partition("#")
        if anchor and path.endswith(".md") and anchor not in _slugs(readme.parent / path):
            missing.append(target)

    assert not missing, f"README links to headings that do not exist: {missing}"


def test_every_event_kind_is_on_the_events_page() -> None:
    from inspo_engine import events

    page = (DOCS / "events.md").read_text(encoding="utf-8")
    kinds = [  # a base of other events (PopulationRecord) is no kind of its own
        cls.kind
        for cls in vars(events).values()
        if isinstance(cls, type)
        and issubclass(cls, events.Event)
        and cls is not events.Event
        and not cls.__subclasses__()
    ]

    assert kinds
    assert not [kind for kind in kinds if f"`{kind}`" not in page]


@pytest.mark.slow
def test_the_site_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed in this environment: make install (requirements/dev.txt)")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )

    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    assert (site / "configuration.html").is_file()
    assert (site / "modules.html").is_file()
    assert (site / "settings.html").is_file()
    assert "/api/v1/runs/{run_id}/clone/" in (site / "api.html").read_text(encoding="utf-8")
    # Opened from disk, every link between pages names a file: none opens a folder (a directory listing).
    folders = []
    for page in sorted(site.rglob("*.html")):
        for target in re.findall(r'href="([^"#]*)(?:#[^"]*)?"', page.read_text(encoding="utf-8")):
            if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target) and (page.parent / target).is_dir():
                folders.append(f"{page.relative_to(site)} → {target}")
    assert not folders, "links that open a folder from disk:\n" + "\n".join(folders[:20])
