"""Memberships: only owners manage them, a team always keeps an owner (also under concurrent demotions), adding by
username invites without telling whether the name exists; user and team creation checks."""

from __future__ import annotations

import contextlib
import threading

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404

from tests.factories import UserFactory
from webapp.accounts.models import Invitation, Membership, Role
from webapp.accounts.services import (
    invitation_accept,
    invitation_decline,
    member_add,
    membership_remove,
    membership_set,
    team_create,
    user_create,
)
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_two_owners_demoting_each_other_at_once_leave_one_owner(alice, alice_team, monkeypatch):
    """Both demotions are held just before they write until the other has checked too (or 2 s passed): without
    locks both checks see another owner and the team ends with none."""
    zoe = UserFactory(username="zoe")
    membership_set(team=alice_team, user=zoe, role=Role.OWNER, by=None)
    both_checked = threading.Barrier(2)
    real_save = Membership.save

    def save_after_the_other_checked(self, *args, **kwargs):
        with contextlib.suppress(threading.BrokenBarrierError):
            both_checked.wait(timeout=2)
        real_save(self, *args, **kwargs)

    monkeypatch.setattr(Membership, "save", save_after_the_other_checked)
    refused: list[str] = []

    def demote(who, by):
        try:
            membership_set(team=alice_team, user=who, role=Role.MEMBER, by=by)
        except Conflict as error:
            refused.append(error.message)
        finally:
            connection.close()

    threads = [threading.Thread(target=demote, args=pair) for pair in ((zoe, alice), (alice, zoe))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    owners = list(Membership.objects.filter(team=alice_team, role=Role.OWNER).values_list("user__username", flat=True))
    assert len(owners) == 1, owners
    assert refused == ["Alice's team needs at least one other owner first"]


def test_an_owner_cannot_tell_an_unknown_name_from_an_account(alice, alice_team, bob):
    """Inviting bob (an active account), an inactive account and a name nobody has: the same answer, nobody joins;
    only bob gets an invitation, which he accepts to join."""
    UserFactory(username="gone", is_active=False)
    answers = [member_add(team=alice_team, username=name, role=Role.VIEWER, by=alice) for name in ("bob", "gone", "x")]
    assert answers == [None, None, None]
    assert set(alice_team.memberships.values_list("user__username", flat=True)) == {"alice"}
    invitation = Invitation.objects.get()
    assert (invitation.user, invitation.role) == (bob, Role.VIEWER)
    assert invitation_accept(invitation_id=invitation.pk, user=bob).role == Role.VIEWER
    assert not Invitation.objects.exists()


def test_only_the_invited_user_answers_an_invitation(alice, alice_team, bob, mia):
    member_add(team=alice_team, username="bob", role=Role.MEMBER, by=alice)
    invitation = Invitation.objects.get()
    with pytest.raises(Http404):
        invitation_accept(invitation_id=invitation.pk, user=mia)
    with pytest.raises(PermissionDenied):
        member_add(team=alice_team, username="bob", role=Role.OWNER, by=mia)
    invitation_decline(invitation_id=invitation.pk, user=bob)
    assert not Membership.objects.filter(team=alice_team, user=bob).exists()


def test_adding_a_current_member_changes_the_role_at_once(alice, alice_team, mia):
    assert member_add(team=alice_team, username="mia", role=Role.VIEWER, by=alice).role == Role.VIEWER
