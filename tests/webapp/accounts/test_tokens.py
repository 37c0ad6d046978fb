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
    page = client.post(reverse("accounts:tokens"), {"name": "laptop"}).content.decode()
    key = re.search(r'id="new-token">([^<]+)<', page).group(1)
    token = ApiToken.objects.get(user=alice)
    assert token.digest == token_digest(key) and key not in str(token.__dict__)
    assert key not in client.get(reverse("accounts:tokens")).content.decode()

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
