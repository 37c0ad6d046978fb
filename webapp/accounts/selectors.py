"""Reads about teams, memberships and tokens, always scoped to the user asking."""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404

from webapp.core.errors import InvalidInput

from .models import ApiToken, Invitation, Membership, Role, Team, TeamSecret, User
from .permissions import AnyUser


def team_list(*, user: AnyUser, min_role: Role = Role.VIEWER) -> QuerySet[Team]:
    """The user's teams (where their role is at least `min_role`), each annotated with `role`."""
    if not user.is_authenticated:
        return Team.objects.none()
    roles = [r for r in Role if r.rank >= min_role.rank]
    role = Membership.objects.filter(team=OuterRef("pk"), user=user).values("role")[:1]
    teams = Team.objects.filter(memberships__user=user, memberships__role__in=roles)
    return teams.annotate(role=Subquery(role)).order_by("name")


def team_get(*, user: AnyUser, slug: str) -> Team:
    """One of the user's teams by slug; 404 for any other."""
    team = team_list(user=user).filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    return team


def team_for_submission(*, user: AnyUser, slug: str | None) -> Team:
    """What a submission (a run, an experiment, an upload) belongs to: the named team among the user's, or their only
    team. Unknown and foreign slugs read the same (a 400 naming `team`)."""
    if slug:
        try:
            return team_get(user=user, slug=slug)
        except Http404:
            raise InvalidInput({"team": ["no team with this slug among yours"]}) from None
    teams = list(team_list(user=user)[:2])
    if len(teams) != 1:
        raise InvalidInput({"team": ["you are in several teams (or none): name one"]})
    return teams[0]


def membership_list(*, team: Team) -> QuerySet[Membership]:
    return team.memberships.select_related("user").order_by("user__username")


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def invitation_list(*, user: User) -> QuerySet[Invitation]:
    """The invitations waiting for the user's answer (an owner never sees whom an invitation reached)."""
    return Invitation.objects.filter(user=user).select_related("team", "invited_by").order_by("-created_at")


def team_secret_list(*, team: Team) -> QuerySet[TeamSecret]:
    """The team's stored keys: names and dates only (callers never read `ciphertext`)."""
    return TeamSecret.objects.filter(team=team).select_related("created_by").defer("ciphertext").order_by("name")
