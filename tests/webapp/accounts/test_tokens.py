"""API tokens: made and revoked on the token page, shown once, stored only as a digest, accepted by the API."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from webapp.accounts.authentication import token_digest
from webapp.accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def test_a_new_token_is_shown_once_and_only_its_digest_is_kept(alice):
    client = Client()
    client.force_login(alice)
    response = client.post(reverse("accounts:tokens"), {"name": "laptop"}, follow=True)
    assert response.redirect_chain == [(reverse("accounts:tokens"), 302)]
    key = re.search(r'id="new-token">([^<]+)<', response.content.decode()).group(1)
    token = ApiToken.objects.get(user=alice)
    assert token.digest == token_digest(key) and key not in str(token.__dict__)
    assert key not in client.get(reverse("accounts:tokens")).content.decode()
    assert key not in str(dict(client.session))

    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/runs/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None

    client.post(reverse("accounts:token-revoke", kwargs={"token_id": token.pk}))
    assert not ApiToken.objects.exists()
    assert api.get("/api/v1/runs/").status_code == 401


def test_nobody_revokes_someone_elses_token(alice, bob):
    from webapp.accounts.services import api_token_create

    token, _ = api_token_create(user=alice, name="ci")
    client = Client()
    client.force_login(bob)
    assert client.post(reverse("accounts:token-revoke", kwargs={"token_id": token.pk})).status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_an_inactive_users_token_is_refused(alice, api):
    client = api(alice)
    alice.is_active = False
    alice.save()
    assert client.get("/api/v1/runs/").status_code == 401


def test_reloading_the_page_after_creating_a_token_creates_no_second_one(alice):
    client = Client()
    client.force_login(alice)
    created = client.post(reverse("accounts:tokens"), {"name": "laptop"})
    assert created.status_code == 302 and created["Location"] == reverse("accounts:tokens")
    shown = client.get(created["Location"])
    assert 'id="new-token"' in shown.content.decode() and "no-store" in shown["Cache-Control"]
    reloaded = client.get(created["Location"])  # what a reload of the page after the redirect sends
    assert 'id="new-token"' not in reloaded.content.decode()
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_a_token_without_a_name_is_refused_on_the_page(alice):
    client = Client()
    client.force_login(alice)
    response = client.post(reverse("accounts:tokens"), {"name": "  "})
    assert response.status_code == 400 and 'id="new-token"' not in response.content.decode()
    assert not ApiToken.objects.exists()
