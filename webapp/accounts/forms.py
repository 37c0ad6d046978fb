"""Forms of the account pages: sign-in (rate limited, also the admin's), token creation, team membership, a team's
stored keys."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from .models import Role
from .signin import signin_failed, signin_refusal, signin_succeeded

RATE_LIMITED = "rate_limited"


class RateLimitedSignIn(AuthenticationForm):
    """Django's sign-in form, refused before the password is checked once an address has failed too often
    (see `signin`); the error's code is RATE_LIMITED."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        refusal = signin_refusal(self.request, username) if self.request is not None else None
        if refusal:
            raise ValidationError(refusal, code=RATE_LIMITED)
        try:
            cleaned = super().clean()
        except ValidationError:
            if self.request is not None:
                signin_failed(self.request, username)
            raise
        if self.request is not None:
            signin_succeeded(self.request, username)
        return cleaned


class SignInForm(RateLimitedSignIn):
    pass


class AdminSignInForm(RateLimitedSignIn, AdminAuthenticationForm):
    """The admin's sign-in, with the same limit."""


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'laptop' or 'CI'.")


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class TeamSecretForm(forms.Form):
    """A key for the team's page of stored keys: its name and value. The value's input never shows it (not even on
    a refused form); the service checks both."""

    name = forms.CharField(
        max_length=64, help_text="How runs name it: letters, digits, '_', '.', '-'. An existing name is replaced."
    )
    value = forms.CharField(
        max_length=4096,
        strip=False,
        label="Key",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted; no page or endpoint shows it again.",
    )
