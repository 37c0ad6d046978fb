"""Sign-in and sign-out pages, the team page for owners, invitations, and the create_team_user command."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory
from webapp.accounts.authentication import token_digest
from webapp.accounts.models import ApiToken, Invitation, Membership, User

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


def test_an_owner_invites_from_the_team_page_and_the_answer_never_tells_if_the_name_exists(alice, alice_team):
    UserFactory(username="nora")
    client = Client()
    client.force_login(alice)
    team = reverse("accounts:team", kwargs={"slug": alice_team.slug})
    answers = {}
    for name in ("nora", "ghost"):
        response = client.post(team, {"username": name, "role": "member"}, follow=True)
        page = response.content.decode().replace(name, "NAME")
        answers[name] = (response.redirect_chain, re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", page))
    assert answers["nora"] == answers["ghost"]
    assert "invited to Alice&#x27;s team as member" in answers["nora"][1]
    assert not Membership.objects.filter(user__username="nora").exists()

    nora = Client()
    nora.force_login(User.objects.get(username="nora"))
    listed = nora.get(reverse("accounts:invitations"))
    assert b"Alice&#x27;s team" in listed.content and b"Invitations (1)" in listed.content
    invitation = Invitation.objects.get(user__username="nora")
    assert nora.post(reverse("accounts:invitation-accept", args=[invitation.pk])).status_code == 302
    assert Membership.objects.get(user__username="nora").role == "member"


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


def test_create_team_user_prints_an_api_token_once_when_asked():
    out = StringIO()
    call_command("create_team_user", "--token", team="Demo Team", username="demo", stdout=out)
    key = re.search(r"token: (\S+)", out.getvalue()).group(1)
    token = ApiToken.objects.get(user__username="demo")
    assert token.name == "create_team_user" and token.digest == token_digest(key)
    assert Client(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/runs/").status_code == 200

    named = StringIO()
    call_command("create_team_user", "--token", "ci", team="Demo Team", username="demo", stdout=named)
    assert "exists" in named.getvalue() and "token: " in named.getvalue()
    assert sorted(ApiToken.objects.values_list("name", flat=True)) == ["ci", "create_team_user"]

    plain = StringIO()
    call_command("create_team_user", team="Demo Team", username="demo", stdout=plain)
    assert "token" not in plain.getvalue() and ApiToken.objects.count() == 2
