"""The engine must not depend on the web app, Django or Celery."""

import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "inspo_engine"


def test_no_engine_module_imports_the_web_stack():
    offenders = []
    for path in ENGINE.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                root = words[1].split(".")[0]
                if root in {"django", "celery", "webapp", "workers", "rest_framework", "kombu"}:
                    offenders.append(f"{path.name}: {line.strip()}")
    assert offenders == []


@pytest.mark.slow
def test_importing_every_engine_module_loads_no_web_stack():
    code = (
        "import importlib, pkgutil, sys, inspo_engine\n"
        "for m in pkgutil.walk_packages(inspo_engine.__path__, 'inspo_engine.'):\n"
        "    if m.name.endswith('__main__'): continue\n"
        "    importlib.import_module(m.name)\n"
        "bad = [n for n in sys.modules if n.split('.')[0] in ('django', 'celery', 'webapp', 'workers')]\n"
        "print(bad); assert not bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
