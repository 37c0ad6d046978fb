"""Who may do what: users, teams, memberships with a role each, and hashed API tokens."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """A person who signs in. Teams come through memberships."""


class Team(models.Model):
    """A group whose members share runs; every run belongs to exactly one team."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    tracking_default = models.JSONField(
        default=dict,
        blank=True,
        help_text="The tracking section of the team's runs that name no trackers of their own (docs/tracking.md); "
        "empty: none. Set through `runs.services.team_tracking_set`, which checks it as a run's.",
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    """Viewers read; members also submit and cancel runs; owners also manage members."""

    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"

    @property
    def rank(self) -> int:
        return {"viewer": 0, "member": 1, "owner": 2}[self.value]


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = (models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_user_and_team"),)
        indexes = (models.Index(fields=["user", "team"], name="membership_user_team"),)

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Invitation(models.Model):
    """An owner's invitation for a user to join a team; the user becomes a member only by accepting it. Adding by
    username goes through these, so the owner's answer is the same whether or not the name belongs to anyone."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = (models.UniqueConstraint(fields=["team", "user"], name="one_invitation_per_user_and_team"),)

    def __str__(self) -> str:
        return f"{self.user} invited to {self.team} ({self.role})"


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored, so the token itself is shown once, when it is made."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class TeamSecret(models.Model):
    """A team's own API key, for the base URL its runs bring. Stored encrypted (see `secrets`); no page or
    endpoint ever shows the value again, only its name."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)
        constraints = (models.UniqueConstraint(fields=["team", "name"], name="one_secret_name_per_team"),)

    def __str__(self) -> str:
        return f"{self.name} ({self.team})"
