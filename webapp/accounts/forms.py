"""Forms of the account pages: sign-in, token creation, team membership."""

from __future__ import annotations

from django import forms

from .models import Role


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'laptop' or 'CI'.")


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)
