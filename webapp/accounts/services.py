"""Changes to accounts: users, teams, memberships and API tokens. Pages, the API, admin and commands call these."""

from __future__ import annotations

import re
import secrets

from django.contrib.auth.password_validation import validate_password
from django.db import transaction
from django.http import Http404
from django.utils.text import slugify

from webapp.core.errors import Conflict, InvalidInput

from .authentication import token_digest
from .models import ApiToken, Invitation, Membership, Role, Team, TeamSecret, User
from .permissions import require_role
from .secrets import secret_seal

TOKEN_PREFIX = "inspo_"


def user_create(*, username: str, password: str, email: str = "", validate: bool = True) -> User:
    if User.objects.filter(username=username).exists():
        raise InvalidInput({"username": [f"{username!r} is taken"]})
    user = User(username=username, email=email)
    if validate:
        validate_password(password, user)
    user.set_password(password)
    user.full_clean(exclude=["password"])
    user.save()
    return user


def team_create(*, name: str, slug: str | None = None, owner: User | None = None) -> Team:
    slug = slug or slugify(name)
    if not slug:
        raise InvalidInput({"slug": ["a team needs a name with letters or digits"]})
    if Team.objects.filter(slug=slug).exists():
        raise InvalidInput({"slug": [f"{slug!r} is taken"]})
    with transaction.atomic():
        team = Team.objects.create(name=name, slug=slug)
        if owner is not None:
            Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    return team


def membership_set(*, team: Team, user: User, role: Role, by: User | None) -> Membership:
    """Add the user to the team or change their role. `by` must be an owner (None: the system, e.g. a command).
    Owners add people through `member_invite`; this adds directly."""
    if by is not None:
        require_role(by, team, Role.OWNER)
    with transaction.atomic():
        owners = _lock_owners(team)
        membership, _ = Membership.objects.select_for_update().get_or_create(
            team=team, user=user, defaults={"role": role}
        )
        if membership.role != role:
            if membership.role == Role.OWNER:
                _keep_an_owner(team, owners, leaving=user)
            membership.role = role
            membership.save(update_fields=["role"])
        Invitation.objects.filter(team=team, user=user).delete()
    return membership


def membership_remove(*, team: Team, user: User, by: User) -> None:
    require_role(by, team, Role.OWNER)
    with transaction.atomic():
        owners = _lock_owners(team)
        membership = Membership.objects.select_for_update().filter(team=team, user=user).first()
        if membership is None:
            raise Http404("not a member")
        if membership.role == Role.OWNER:
            _keep_an_owner(team, owners, leaving=user)
        membership.delete()


def _lock_owners(team: Team) -> list[Membership]:
    """Lock every owner row of the team, in one order, until the transaction ends. Two owners demoting or removing
    each other at once then take turns: the second sees the first's change and finds no other owner."""
    return list(Membership.objects.select_for_update().filter(team=team, role=Role.OWNER).order_by("pk"))


def _keep_an_owner(team: Team, owners: list[Membership], *, leaving: User) -> None:
    if not any(owner.user_id != leaving.pk for owner in owners):
        raise Conflict(f"{team.name} needs at least one other owner first")


def member_add(*, team: Team, username: str, role: Role, by: User) -> Membership | None:
    """What an owner's "add a member" does. A current member gets the role at once (the owner sees the members
    anyway). Anyone else is invited: the user joins by accepting. Returns None then, whether or not an active user
    of that name exists, so that the answer tells nothing about other people's accounts."""
    require_role(by, team, Role.OWNER)
    username = username.strip()
    member = Membership.objects.filter(team=team, user__username=username).select_related("user").first()
    if member is not None:
        return membership_set(team=team, user=member.user, role=role, by=by)
    user = User.objects.filter(username=username, is_active=True).first()
    if user is not None:
        Invitation.objects.update_or_create(team=team, user=user, defaults={"role": role, "invited_by": by})
    return None


def invitation_accept(*, invitation_id: int, user: User) -> Membership:
    """The invited user joins the team with the invitation's role; 404 for anyone else's invitation."""
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().filter(pk=invitation_id, user=user).first()
        if invitation is None:
            raise Http404("no such invitation")
        membership, _ = Membership.objects.get_or_create(
            team=invitation.team, user=user, defaults={"role": invitation.role}
        )
        invitation.delete()
    return membership


def invitation_decline(*, invitation_id: int, user: User) -> None:
    deleted, _ = Invitation.objects.filter(pk=invitation_id, user=user).delete()
    if not deleted:
        raise Http404("no such invitation")


def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """A new token and its key. The key is returned this once; only its digest is kept."""
    name = name.strip()
    if not name:
        raise InvalidInput({"name": ["give the token a name"]})
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name[:100], prefix=key[:12], digest=token_digest(key))
    return token, key


def api_token_revoke(*, user: User, token_id: int) -> None:
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    if not deleted:
        raise Http404("no such token")


SECRET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_SECRET_CHARS = 4096


def team_secret_set(*, team: Team, user: User, name: str, value: str) -> TeamSecret:
    """Store (or replace) the team's API key `name`, encrypted. Runs name it in `optimizer.team_secret` to send it
    to the base URL they bring; the value is never shown again."""
    require_role(user, team, Role.MEMBER)
    errors: dict[str, list[str]] = {}
    if not SECRET_NAME.fullmatch(name):
        errors["name"] = ["letters, digits, '_', '.', '-', at most 64, starting with a letter or digit"]
    if not value or len(value) > MAX_SECRET_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in value):
        errors["value"] = [f"a key of 1 to {MAX_SECRET_CHARS} characters without control characters"]
    if errors:
        raise InvalidInput(errors)
    ciphertext = secret_seal(team_id=team.pk, name=name, value=value)
    secret, _ = TeamSecret.objects.update_or_create(
        team=team, name=name, defaults={"ciphertext": ciphertext, "created_by": user}
    )
    return secret


def team_secret_delete(*, team: Team, user: User, name: str) -> None:
    require_role(user, team, Role.MEMBER)
    deleted, _ = TeamSecret.objects.filter(team=team, name=name).delete()
    if not deleted:
        raise Http404("no such key")
