"""The engine's floors (docs/architecture.md, "Inside the engine"): no module of the core imports a backend, and no
engine module imports itself back round a loop of imports.

What counts as an import: every `import` and `from … import` anywhere in a module — at the top, inside a function,
under `if TYPE_CHECKING:` — with relative imports resolved against the module's package. `from pkg import name`
counts `pkg.name` too when that is a module. An import of `a.b.c` also counts the packages `a.b` and `a`, whose
`__init__` Python runs first, except the packages that hold the importing module itself: Python is already running
those when the module runs, so counting them would only make a false cycle of every package whose `__init__`
re-exports its own modules (`proposers/__init__.py` imports `proposers.parsing`, which imports its siblings). Only
imports of the engine's own modules make edges.

The core is every module except the backends (`backends/`) and the entry points (`ENTRY_POINTS`): the backends
implement `inspo_engine.policy.PolicyBackend`, and only the entry points construct one. The backends in turn import
no entry point (the verl job lives beside `build.py`, not in `backends/verl`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "inspo_engine"
BACKENDS = f"{ENGINE}.backends"
ENTRY_POINTS = frozenset(f"{ENGINE}.{name}" for name in ("__main__", "cli", "build", "verl_job"))
"""The modules above the backends: the command line, the run builder and the verl job; they may import a backend."""


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by its dotted name; a package by its own name."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports, as the module docstring counts them."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            targets.add(source)
            targets |= {f"{source}.{alias.name}" for alias in node.names}
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + (1 if is_package else 0) + 1)}
    counted = set()
    for target in targets:
        parts = target.split(".")
        counted |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return (counted & known) - own - {name}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    found = modules(root, package)
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def is_core(name: str, package: str = ENGINE, entry_points: frozenset[str] = ENTRY_POINTS) -> bool:
    backends = f"{package}.backends"
    return name not in entry_points and name != backends and not name.startswith(f"{backends}.")


def core_imports_of_backends(graph: dict[str, set[str]], package: str = ENGINE) -> dict[str, list[str]]:
    """Each core module that imports a backend, with what it imports of `backends/`."""
    backends = f"{package}.backends"
    offenders = {
        name: sorted(m for m in targets if m == backends or m.startswith(f"{backends}."))
        for name, targets in graph.items()
        if is_core(name, package)
    }
    return {name: found for name, found in offenders.items() if found}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A loop of imports, as its modules with the first repeated at the end; None when there is none."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = "open"
        trail.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                return [*trail[trail.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        state[name] = "done"
        trail.pop()
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)) is not None:
            return cycle
    return None


def test_no_core_module_imports_a_backend():
    assert core_imports_of_backends(import_graph(ROOT, ENGINE)) == {}


def test_no_backend_imports_an_entry_point():
    graph = import_graph(ROOT, ENGINE)
    backends = {name for name in graph if name == BACKENDS or name.startswith(f"{BACKENDS}.")}
    offenders = {name: sorted(graph[name] & ENTRY_POINTS) for name in backends}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_engine_modules_import_each_other_in_no_cycle():
    cycle = find_cycle(import_graph(ROOT, ENGINE))
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_entry_points_and_the_backends_exist():
    found = modules(ROOT, ENGINE)
    assert set(found) >= ENTRY_POINTS and BACKENDS in found


def test_model_resolution_imports_torch_only_where_it_builds_the_cache():
    """The web app and the local optimizer resolve model names through `inspo_engine.models` without torch."""
    tree = ast.parse((ROOT / ENGINE / "models.py").read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = {alias.name for node in top if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module or "" for node in top if isinstance(node, ast.ImportFrom)}
    assert not {name.split(".")[0] for name in names} & {"torch", "transformers", "huggingface_hub"}


def _plant(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checks_see_a_planted_import_of_a_backend_inside_a_function_and_the_cycle_it_closes(tmp_path):
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "from .core import run\n",
            "pkg/core.py": "def run():\n    from .backends.torch.backend import Backend\n",
            "pkg/backends/__init__.py": "",
            "pkg/backends/torch/__init__.py": "",
            "pkg/backends/torch/backend.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ...core import run\nclass Backend: ...\n"
            ),
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.core"] == {"pkg.backends", "pkg.backends.torch", "pkg.backends.torch.backend"}
    assert core_imports_of_backends(graph, "pkg") == {
        "pkg.core": ["pkg.backends", "pkg.backends.torch", "pkg.backends.torch.backend"]
    }
    assert find_cycle(graph) == ["pkg.core", "pkg.backends.torch.backend", "pkg.core"]


def test_a_package_that_re_exports_its_own_modules_is_no_cycle(tmp_path):
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/parts/__init__.py": "from .a import A\nfrom .b import B\n",
            "pkg/parts/a.py": "from pkg.parts.b import B\nA = B\n",
            "pkg/parts/b.py": "from . import c\nB = 1\n",
            "pkg/parts/c.py": "import pkg.parts.b\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.parts.a"] == {"pkg.parts.b"}
    assert find_cycle({name: targets for name, targets in graph.items() if name != "pkg.parts.c"}) is None
    assert find_cycle(graph) == ["pkg.parts.b", "pkg.parts.c", "pkg.parts.b"]
