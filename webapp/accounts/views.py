"""Account pages: sign-in and sign-out, the API token page (a new token is shown once), team members, and a team's
stored keys (owners only; values never shown)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from webapp.core.errors import InvalidInput, ServiceError

from . import selectors, services
from .forms import RATE_LIMITED, MemberForm, SignInForm, TeamSecretForm, TokenForm
from .models import Role, Team, User
from .permissions import acting_user, require_role, role_of


class SignInView(auth_views.LoginView):
    """Sign-in; an address that failed too often gets a 429 with the form saying how long to wait."""

    template_name = "accounts/login.html"
    redirect_authenticated_user = True
    authentication_form = SignInForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if form.has_error(NON_FIELD_ERRORS, code=RATE_LIMITED):
            response.status_code = 429
        return response


class SignOutView(auth_views.LogoutView):
    pass


NEW_TOKEN_SESSION_KEY = "accounts:new-token"
"""Where a just-created key waits in the session for the one page that shows it (taken out as it is shown)."""


@never_cache
@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    """The user's tokens. Creating one redirects back here (so reloading the page never creates a second), and
    the new key is shown on that one page only."""
    user = acting_user(request)
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        _, key = services.api_token_create(user=user, name=form.cleaned_data["name"])
        request.session[NEW_TOKEN_SESSION_KEY] = key
        return redirect("accounts:tokens")
    new_key = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    context = {"form": form, "tokens": selectors.api_token_list(user=user), "new_key": new_key}
    return render(request, "accounts/tokens.html", context, status=400 if request.method == "POST" else 200)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    user = acting_user(request)
    services.api_token_revoke(user=user, token_id=token_id)
    messages.success(request, "Token revoked.")
    return redirect("accounts:tokens")


@login_required
def team_members(request: HttpRequest, slug: str) -> HttpResponse:
    me = acting_user(request)
    team = selectors.team_get(user=me, slug=slug)
    form = MemberForm(request.POST or None)
    if request.method == "POST":
        require_role(me, team, Role.OWNER)
        if form.is_valid():
            username, role = form.cleaned_data["username"], Role(form.cleaned_data["role"])
            try:
                member = services.member_add(team=team, username=username, role=role, by=me)
            except ServiceError as error:
                messages.error(request, error.message)
            else:
                if member is not None:
                    messages.success(request, f"{member.user.username} is now {role.value} of {team.name}.")
                else:
                    messages.success(request, invitation_message(username=username, team=team, role=role))
                return redirect("accounts:team", slug=team.slug)
    context = {
        "team": team,
        "role": role_of(me, team),
        "members": selectors.membership_list(team=team),
        "is_owner": role_of(me, team) == Role.OWNER,
        "form": form,
    }
    return render(request, "accounts/team.html", context, status=400 if form.errors else 200)


def invitation_message(*, username: str, team: Team, role: Role) -> str:
    """The one answer to inviting a non-member, the same whether or not the account exists."""
    return (
        f"If {username!r} is an active account, it is invited to {team.name} as {role.value}; "
        "it joins when it accepts on its Invitations page."
    )


@login_required
def invitation_list(request: HttpRequest) -> HttpResponse:
    me = acting_user(request)
    return render(request, "accounts/invitations.html", {"invitations": selectors.invitation_list(user=me)})


@login_required
@require_POST
def invitation_answer(request: HttpRequest, id: int, answer: str) -> HttpResponse:
    me = acting_user(request)
    if answer == "accept":
        membership = services.invitation_accept(invitation_id=id, user=me)
        messages.success(request, f"You joined {membership.team.name} as {membership.role}.")
    else:
        services.invitation_decline(invitation_id=id, user=me)
        messages.success(request, "Invitation declined.")
    return redirect("accounts:invitations")


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, user_id: int) -> HttpResponse:
    me = acting_user(request)
    team = selectors.team_get(user=me, slug=slug)
    member = get_object_or_404(User, pk=user_id)
    try:
        services.membership_remove(team=team, user=member, by=me)
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("accounts:team", slug=team.slug)


@never_cache
@login_required
def team_secrets(request: HttpRequest, slug: str) -> HttpResponse:
    """The team's stored keys, for its owners: their names (never their values), a form that stores one or replaces
    the key of that name, and a delete button each. Members and viewers get a 403, anyone outside the team a 404.
    Runs name a key in `optimizer.team_secret`; the team's default trackers name theirs (W&B, MLflow)."""
    me = acting_user(request)
    team = selectors.team_get(user=me, slug=slug)
    require_role(me, team, Role.OWNER)
    form = TeamSecretForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"]
        replaced = selectors.team_secret_list(team=team).filter(name=name).exists()
        try:
            services.team_secret_set(team=team, user=me, name=name, value=form.cleaned_data["value"])
        except InvalidInput as error:
            for field, messages_ in error.errors.items():
                for message in messages_:
                    form.add_error(field if field in form.fields else None, message)
        else:
            messages.success(request, f"{'Replaced' if replaced else 'Stored'} the key “{name}” of {team.name}.")
            return redirect("accounts:team-secrets", slug=team.slug)
    context = {"team": team, "form": form, "secrets": selectors.team_secret_list(team=team)}
    return render(request, "accounts/team_secrets.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def team_secret_delete(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Delete one of the team's keys (owners only, as on its page); runs that name it are refused from then on."""
    me = acting_user(request)
    team = selectors.team_get(user=me, slug=slug)
    require_role(me, team, Role.OWNER)
    services.team_secret_delete(team=team, user=me, name=name)
    messages.success(request, f"Deleted the key “{name}” of {team.name}.")
    return redirect("accounts:team-secrets", slug=team.slug)
