"""The web app must not depend on the Celery side: workers import the web app's services, never the reverse."""

import ast
from pathlib import Path

WEBAPP = Path(__file__).resolve().parents[2] / "webapp"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_webapp_module_imports_workers():
    offenders = [str(p.relative_to(WEBAPP)) for p in WEBAPP.rglob("*.py") if "workers" in imported_roots(p)]
    assert offenders == []


def test_the_check_sees_an_import_of_workers(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from workers.training import run\n")
    assert "workers" in imported_roots(module)
