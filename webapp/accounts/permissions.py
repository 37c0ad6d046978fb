"""The team permission check every page, endpoint and service goes through: member or 404, role or 403."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from rest_framework.request import Request

from .models import Membership, Role, Team, User

AnyUser = User | AnonymousUser


def acting_user(request: HttpRequest | Request) -> User:
    """The signed-in user of a request that authentication already let through (pages need login_required,
    the API IsAuthenticated); anything else is refused."""
    user = request.user
    if not isinstance(user, User) or not user.is_active:
        raise PermissionDenied("sign in first")
    return user


def role_of(user: AnyUser, team: Team) -> Role | None:
    """The user's role in the team, or None for anyone outside it (anonymous included)."""
    if not user.is_authenticated:
        return None
    role = Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()
    return Role(role) if role else None


def require_role(user: AnyUser, team: Team, minimum: Role) -> Role:
    """The user's role when it is at least `minimum`. Outsiders get 404 (the team's objects do not exist for
    them); members below the role get 403."""
    role = role_of(user, team)
    if role is None:
        raise Http404("not found")
    if role.rank < minimum.rank:
        raise PermissionDenied(f"this needs the {minimum.label.lower()} role in {team.name}; yours is {role.value}")
    return role
