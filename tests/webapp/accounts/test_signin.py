"""Sign-in is rate limited per username and address, and per address: past the limit even the right password is
refused with a 429 that says how long to wait; other addresses and other names are not held up by it."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.INSPO_SIGNIN_MAX_FAILURES = 3
    settings.INSPO_SIGNIN_MAX_FAILURES_PER_ADDRESS = 6
    settings.INSPO_SIGNIN_WINDOW_S = 600
    cache.clear()
    yield
    cache.clear()


def sign_in(username, password, address="203.0.113.7", url="accounts:login"):
    return Client(REMOTE_ADDR=address).post(reverse(url), {"username": username, "password": password})


def test_after_three_failures_even_the_right_password_waits(alice):
    for _ in range(3):
        assert sign_in("alice", "wrong").status_code == 200
    refused = sign_in("alice", PASSWORD)
    assert refused.status_code == 429
    assert "Too many failed sign-ins from your address; try again in 10 minutes" in refused.content.decode()
    assert sign_in("alice", PASSWORD, address="198.51.100.9").status_code == 302  # another address
    assert sign_in("ALICE ", PASSWORD).status_code == 429  # the same name, spelt otherwise


def test_a_right_password_clears_the_count_and_an_address_spraying_names_is_stopped(alice, bob):
    for _ in range(2):
        sign_in("alice", "wrong")
    assert sign_in("alice", PASSWORD).status_code == 302
    for _ in range(2):
        assert sign_in("alice", "wrong").status_code == 200  # counting starts again
    for name in ("bob", "carol", "dave", "erin"):
        sign_in(name, "wrong")
    assert sign_in("bob", PASSWORD).status_code == 429  # six failures from the address, over all names


def test_the_admin_sign_in_has_the_same_limit(alice):
    for _ in range(3):
        sign_in("alice", "wrong", url="admin:login")
    refused = sign_in("alice", PASSWORD, url="admin:login")
    assert "Too many failed sign-ins" in refused.content.decode()
    assert not refused.wsgi_request.user.is_authenticated
