"""Memberships: only owners manage them, a team always keeps an owner; user and team creation checks."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from tests.factories import UserFactory
from webapp.accounts.models import Membership, Role
from webapp.accounts.services import membership_remove, membership_set, team_create, user_create
from webapp.core.errors import Conflict, InvalidInput

pytestmark = pytest.mark.django_db


def test_an_owner_adds_and_promotes_members(alice, alice_team):
    newcomer = UserFactory(username="nora")
    membership_set(team=alice_team, user=newcomer, role=Role.VIEWER, by=alice)
    membership_set(team=alice_team, user=newcomer, role=Role.MEMBER, by=alice)
    assert Membership.objects.get(team=alice_team, user=newcomer).role == Role.MEMBER


def test_members_and_outsiders_cannot_manage_members(mia, bob, alice_team):
    newcomer = UserFactory(username="nora")
    with pytest.raises(PermissionDenied):
        membership_set(team=alice_team, user=newcomer, role=Role.OWNER, by=mia)
    with pytest.raises(Http404):
        membership_set(team=alice_team, user=newcomer, role=Role.OWNER, by=bob)
    assert not Membership.objects.filter(user=newcomer).exists()


def test_the_last_owner_cannot_leave_or_step_down(alice, alice_team, mia):
    with pytest.raises(Conflict):
        membership_remove(team=alice_team, user=alice, by=alice)
    with pytest.raises(Conflict):
        membership_set(team=alice_team, user=alice, role=Role.MEMBER, by=alice)
    membership_set(team=alice_team, user=mia, role=Role.OWNER, by=alice)
    membership_remove(team=alice_team, user=alice, by=mia)
    assert list(alice_team.memberships.values_list("user__username", flat=True)) == ["mia"]


def test_names_must_be_free_and_passwords_strong(alice, alice_team):
    with pytest.raises(InvalidInput):
        user_create(username="alice", password="a-long-and-unusual-passphrase")
    with pytest.raises(InvalidInput):
        team_create(name="Alice's team", slug="alices")
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        user_create(username="weak", password="123")
    team = team_create(name="Research Group", owner=alice)
    assert team.slug == "research-group" and team.memberships.get().role == Role.OWNER
