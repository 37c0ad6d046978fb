"""docker-compose.yml and the Dockerfile, read statically (no Docker engine runs here): every service the platform
needs is there, each command names a module that imports and a queue some task is routed to, the environment they
set is what the settings read, and everything the image copies exists. With the environment compose gives the web
server, `manage.py check --deploy` finds nothing to warn about; only the TLS proxy is published, Flower only on the
host's loopback, and the CPU workers scale without failing each other's runs."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
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
    assert {"postgres", "redis", "web", "worker-cpu", "worker-gpu", "flower", "retrieval"} <= set(SERVICES)
    assert SERVICES["worker-gpu"]["runtime"] == "nvidia"


def test_workers_search_through_the_retrieval_service_compose_starts():
    service = SERVICES["retrieval"]
    assert service["command"][:3] == ["python", "manage.py", "retrieval_service"]
    port = option(service["command"], "--port")
    for name in ("worker-cpu", "worker-gpu"):
        assert SERVICES[name]["environment"]["INSPO_RETRIEVAL_URL"] == f"http://retrieval:{port}"
    assert "ports" not in service, "the retrieval service answers the compose network only"


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


def compose_value(raw: object) -> str:
    """A compose environment value with `${NAME:-default}` as its default and `${NAME:?…}` given a test value."""
    test_values = {"DJANGO_SECRET_KEY": "compose-check-deploy-not-a-secret-0123456789abcdefghij"}

    def substitute(match: re.Match[str]) -> str:
        name, operator, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        return test_values.get(name, "") if operator == ":?" else rest if operator == ":-" else ""

    return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", substitute, str(raw))


@pytest.mark.slow
def test_check_deploy_with_the_compose_environment_warns_of_nothing(tmp_path):
    env = {name: compose_value(value) for name, value in SERVICES["web"]["environment"].items()}
    env |= {"PATH": os.environ["PATH"], "INSPO_STATE_DIR": str(tmp_path), "DJANGO_STATIC_ROOT": str(tmp_path)}
    assert env["DJANGO_HTTPS"] == "1" and env["DJANGO_CACHE_URL"].startswith("redis://")
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "System check identified no issues" in check.stdout


def published(service: str) -> list[str]:
    return [str(p) for p in SERVICES[service].get("ports", [])]


def test_only_the_proxy_faces_the_network_and_flower_stays_on_the_host():
    assert published("web") == [] and "8000" in [str(p) for p in SERVICES["web"]["expose"]]
    assert {p.rsplit(":", 1)[1] for p in published("proxy")} == {"80", "443"}
    for port in published("flower"):
        assert port.startswith("127.0.0.1:"), f"Flower is published beyond this host: {port}"
    assert "--basic-auth=$$FLOWER_BASIC_AUTH" in SERVICES["flower"]["command"][-1]
    for name in SERVICES:
        if name not in ("proxy", "flower"):
            assert not published(name), f"{name} is published; only the proxy should be"


def test_the_proxy_sends_archives_from_the_folder_the_web_app_builds_them_in():
    web, proxy = SERVICES["web"]["environment"], SERVICES["proxy"]
    assert web["INSPO_ARCHIVE_SERVE"] == "x-accel-redirect"
    nginx = COMPOSE["configs"]["nginx"]["content"]
    location = re.search(r"location (/\S+/) \{\s*internal;\s*alias (\S+);", nginx)
    assert location, "no internal location for X-Accel-Redirect"
    assert location.group(1) == web.get("INSPO_ARCHIVE_ACCEL_PREFIX", "/_archives/")
    assert location.group(2).rstrip("/") == web["INSPO_ARCHIVE_DIR"]
    assert f"archives:{web['INSPO_ARCHIVE_DIR']}:ro" in proxy["volumes"]
    assert "X-Forwarded-Proto https" in nginx  # what SECURE_PROXY_SSL_HEADER trusts; the client's is overwritten


@pytest.mark.parametrize("name", ["worker-cpu"])
def test_a_worker_that_scales_has_a_name_of_its_own_per_replica(name):
    """Workers name themselves `cpu@%h`; a restarting worker fails the runs its name held. A fixed hostname would
    give every replica one name, and each replica starting would fail its siblings' live runs."""
    service = SERVICES[name]
    assert "hostname" not in service and "container_name" not in service
    assert option(service["command"], "-n").endswith("@%h")
