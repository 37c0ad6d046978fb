"""docker-compose.yml and the Dockerfile, read statically (no Docker engine runs here): every service the platform
needs is there, each command names a module that imports and a queue some task is routed to, the environment they
set is what the settings read, and everything the image copies exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_every_service_the_platform_needs_is_there():
    assert {"postgres", "redis", "web", "worker-cpu", "worker-gpu", "flower"} <= set(SERVICES)
    assert SERVICES["worker-gpu"]["runtime"] == "nvidia"


@pytest.mark.parametrize("name", [n for n, s in SERVICES.items() if s.get("command", [""])[0] == "celery"])
def test_celery_commands_import_and_consume_routed_queues(name):
    from webapp.runs.models import Run

    command = SERVICES[name]["command"]
    importlib.import_module(option(command, "-A"))
    if "worker" in command:
        queue = option(command, "-Q")
        routed = {Run(backend=backend).queue for backend in ("torch", "verl")} | {"ops"}
        assert queue in routed
        if queue in ("cpu", "gpu"):
            assert option(command, "-c") == "1", "one training run per worker process"


def test_the_web_command_serves_the_wsgi_app():
    command = SERVICES["web"]["command"][-1]
    module = re.search(r"gunicorn (\S+)", command)
    assert module and importlib.import_module(module.group(1).replace(":application", "")).application


def test_the_environment_compose_sets_is_read_by_the_settings():
    settings_source = (REPO / "webapp" / "config" / "settings.py").read_text()
    read_anywhere = settings_source + "".join(p.read_text() for p in (REPO / "inspo_engine").rglob("*.py"))
    ours = [
        *SERVICES["web"]["environment"],
        *(n for n in SERVICES["worker-gpu"]["environment"] if n.startswith("INSPO_")),
    ]
    for name in ours:
        assert f'"{name}"' in read_anywhere, f"{name} is set in docker-compose.yml but nothing reads it"


def test_what_the_image_copies_exists_and_the_frontend_stage_builds_where_django_looks():
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, flags=re.MULTILINE):
        for source in sources.split():
            assert (REPO / source).exists(), f"Dockerfile copies {source}, which is not in the repository"
    vite = (REPO / "frontend" / "vite.config.ts").read_text()
    assert '"../webapp/static/inspo/app"' in vite
    assert "COPY --from=frontend /src/webapp/static/inspo/app/ webapp/static/inspo/app/" in DOCKERFILE
