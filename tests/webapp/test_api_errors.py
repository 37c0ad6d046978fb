"""Every error under /api/ is JSON with a message, never an HTML page and never a 500 for a bad body: a body
nested too deeply, one too large, an id that is no UUID, a path that names nothing."""

from __future__ import annotations

import json

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


def post_raw(client, body: str):
    client.raise_request_exception = False
    return client.generic("POST", RUNS, body, content_type="application/json")


def assert_json_error(response, status: int, words: str) -> None:
    assert response.status_code == status, response.content[:200]
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    assert words in response.json()["detail"], response.json()


def test_a_body_nested_100k_levels_deep_is_a_400_naming_the_limit(alice, api):
    response = post_raw(api(alice), "[" * 100_000 + "]" * 100_000)
    assert_json_error(response, 400, "nested more than 32 levels deep")


def test_a_body_nested_past_the_limit_but_parseable_is_refused_too(alice, api):
    body = {"name": "deep", "preset": "smoke", "config": {"env": json.loads("[" * 40 + "]" * 40)}}
    assert_json_error(post_raw(api(alice), json.dumps(body)), 400, "nested more than 32 levels deep")


def test_a_body_larger_than_the_limit_is_a_413_naming_the_size(alice, api, settings):
    config = {"population": {"seed_instruction": "x" * 5_000_000}}
    body = json.dumps({"name": "big", "preset": "smoke", "config": config})
    response = post_raw(api(alice), body)
    assert_json_error(response, 413, f"larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/not-a-uuid/",
        "/api/v1/runs/not-a-uuid/cancel/",
        "/api/v1/runs/12345/metrics/",
        "/api/v1/nothing-here/",
    ],
)
def test_an_id_that_is_no_uuid_or_a_path_that_names_nothing_is_a_json_404(alice, api, path):
    response = api(alice).get(path)
    assert_json_error(response, 404, "no such API resource")


def test_the_pages_keep_their_html_404(alice):
    client = Client()
    client.force_login(alice)
    response = client.get("/runs/not-a-uuid/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_a_crash_under_the_api_is_a_json_500_without_details(alice, api, monkeypatch):
    def crash(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("webapp.runs.selectors.run_list", crash)
    client = api(alice)
    client.raise_request_exception = False
    response = client.get(RUNS)
    assert_json_error(response, 500, "internal error")
    assert "secret internals" not in response.content.decode()
