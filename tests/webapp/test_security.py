"""Headers and limits every response gets: a Content-Security-Policy with no inline script anywhere it would be
needed, Swagger UI from the sidecar package's files (no CDN), and API throttling answered by a JSON 429."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.throttling import SimpleRateThrottle

from webapp.config.settings import env_rate

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)


def test_every_response_carries_the_policy_and_it_forbids_inline_scripts(alice):
    page = Client().get("/accounts/login/")
    policy = page["Content-Security-Policy"]
    assert policy == settings.CONTENT_SECURITY_POLICY
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'" and directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    api = Client().get("/api/v1/runs/")
    assert api.status_code == 401 and api["Content-Security-Policy"] == policy


def test_no_template_has_an_inline_script_or_event_handler():
    templates = [p for p in (REPO / "webapp").rglob("templates/**/*.html")]
    assert templates
    for template in templates:
        text = template.read_text()
        assert not INLINE_SCRIPT.search(text), f"{template}: an inline <script> (blocked by script-src 'self')"
        assert not EVENT_HANDLER.search(text), f"{template}: an inline event handler"


def test_swagger_ui_comes_from_the_sidecar_package_with_its_start_script_as_a_file(alice):
    client = Client()
    client.force_login(alice)
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert not INLINE_SCRIPT.search(html)
    assert "cdn" not in html.lower() and "https://" not in html
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    static = [s for s in sources if s.startswith(settings.STATIC_URL) or s.startswith("/" + settings.STATIC_URL)]
    assert any("swagger-ui-bundle.js" in s for s in static)
    for source in static:
        assert finders.find(source.split(settings.STATIC_URL, 1)[1]), f"{source} is not among the static files"
    script = next(s for s in sources if "script" in s and s.startswith("/api/docs/"))
    start = client.get(script.replace("&amp;", "&"))
    assert start.status_code == 200 and start["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in start.content


def test_an_api_client_over_its_rate_gets_a_json_429(alice, api, monkeypatch):
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"user": "3/min", "anon": "2/min"})
    cache.clear()
    client = api(alice)
    assert [client.get("/api/v1/teams/").status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get("/api/v1/teams/")
    assert refused.status_code == 429 and refused["Content-Type"] == "application/json"
    assert refused.json()["detail"].startswith("Request was throttled.") and int(refused["Retry-After"]) > 0
    cache.clear()


def test_rates_are_settings_and_a_bad_one_stops_startup(monkeypatch):
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["user"] == settings.INSPO_API_RATE_USER
    assert "rest_framework.throttling.UserRateThrottle" in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]
    monkeypatch.setenv("INSPO_API_RATE_USER", "lots")
    with pytest.raises(ImproperlyConfigured, match="INSPO_API_RATE_USER='lots'"):
        env_rate("INSPO_API_RATE_USER", "1200/min")
    monkeypatch.setenv("INSPO_API_RATE_USER", "off")
    assert env_rate("INSPO_API_RATE_USER", "1200/min") is None
