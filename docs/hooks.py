"""mkdocs hooks: the generated configuration reference, and a nav that leaves out pages not yet written."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

GENERATED = {
    "configuration.md": ("gen_config", "config_reference"),
    "settings.md": ("gen_settings", "settings_reference"),
    "api.md": ("gen_api", "api_reference"),
    "modules.md": ("gen_modules", "modules_reference"),
}
"""Pages made at build time ({page: (module beside this file, its function that returns the page)}); never on disk."""


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"inspo_docs_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _present(entry: Any, docs_dir: Path) -> Any:
    """The nav entry without the pages that are neither in docs_dir nor generated; None when nothing is left."""
    if isinstance(entry, str):
        return entry if entry in GENERATED or "://" in entry or (docs_dir / entry).is_file() else None
    if isinstance(entry, list):
        kept = [item for item in (_present(item, docs_dir) for item in entry) if item is not None]
        return kept or None
    if isinstance(entry, dict):
        kept_dict = {title: value for title, value in ((t, _present(v, docs_dir)) for t, v in entry.items())}
        kept_dict = {title: value for title, value in kept_dict.items() if value is not None}
        return kept_dict or None
    return entry


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.nav = _present(config.nav, Path(config.docs_dir))
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for page, (module, function) in GENERATED.items():
        files.append(File.generated(config, page, content=getattr(_load(module), function)()))
    return files
