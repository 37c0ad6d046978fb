"""Sign-in and sign-out pages, the team page for owners, and the create_team_user command."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory
from webapp.accounts.models import Membership, User

pytestmark = pytest.mark.django_db


def test_sign_in_then_sign_out(alice):
    client = Client()
    page = client.get(reverse("accounts:login"))
    assert page.status_code == 200 and b"Sign in" in page.content
    wrong = client.post(reverse("accounts:login"), {"username": "alice", "password": "nope"})
    assert wrong.status_code == 200 and "_auth_user_id" not in client.session
    right = client.post(reverse("accounts:login"), {"username": "alice", "password": "correct horse battery staple"})
    assert right.status_code == 302 and right["Location"] == reverse("runs:list")
    assert client.get(reverse("runs:list")).status_code == 200
    assert client.post(reverse("accounts:logout")).status_code == 302
    assert client.get(reverse("runs:list")).status_code == 302


def test_an_owner_adds_a_member_from_the_team_page(alice, alice_team):
    UserFactory(username="nora")
    client = Client()
    client.force_login(alice)
    team = reverse("accounts:team", kwargs={"slug": alice_team.slug})
    assert client.post(team, {"username": "nora", "role": "member"}).status_code == 302
    assert Membership.objects.get(user__username="nora").role == "member"
    assert client.post(team, {"username": "ghost", "role": "member"}).status_code == 400


def test_create_team_user_prints_a_new_password_once():
    out = StringIO()
    call_command("create_team_user", team="Demo Team", username="demo", stdout=out)
    password = re.search(r"password: (\S+)", out.getvalue()).group(1)
    assert User.objects.get(username="demo").check_password(password)
    assert Membership.objects.get(user__username="demo", team__slug="demo-team").role == "owner"

    again = StringIO()
    call_command("create_team_user", team="Demo Team", username="demo", stdout=again)
    assert "password:" not in again.getvalue() and "exists" in again.getvalue()
    assert User.objects.get(username="demo").check_password(password)
