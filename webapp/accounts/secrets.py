"""Encryption of the teams' stored API keys (Fernet, with a key derived from settings); the one place that turns a
stored secret back into its value, for the worker that sends it to its team's URL."""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from .models import Team, TeamSecret


def _fernet() -> Fernet:
    material = (settings.INSPO_SECRETS_KEY or settings.SECRET_KEY).encode()
    key = hmac.new(material, b"inspo team secrets v1", hashlib.sha256).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def _bound(team_id: int, name: str) -> bytes:
    """What a ciphertext is bound to, so a value copied to another team or name does not decrypt there."""
    return f"{team_id}\x1f{name}\x1f".encode()


def secret_seal(*, team_id: int, name: str, value: str) -> str:
    return _fernet().encrypt(_bound(team_id, name) + value.encode()).decode("ascii")


def secret_unseal(*, team_id: int, name: str, ciphertext: str) -> str:
    """The value; ValueError when the ciphertext is not this team's secret of this name or the key changed."""
    try:
        plain = _fernet().decrypt(ciphertext.encode("ascii"))
    except InvalidToken as error:
        raise ValueError(f"the stored key {name!r} cannot be decrypted (was INSPO_SECRETS_KEY changed?)") from error
    prefix = _bound(team_id, name)
    if not plain.startswith(prefix):
        raise ValueError(f"the stored key {name!r} belongs to another team or name")
    return plain[len(prefix) :].decode()


def team_secret_value(*, team: Team, name: str) -> str | None:
    """The decrypted key the team stored under `name`, or None when there is none."""
    secret = TeamSecret.objects.filter(team=team, name=name).first()
    if secret is None:
        return None
    return secret_unseal(team_id=team.pk, name=name, ciphertext=secret.ciphertext)


def team_secret_values(*, team: Team) -> list[str]:
    """Every value the team stored (those that no longer decrypt left out): what a run's notes, events and log lines
    must never show (`inspo_engine.redact`)."""
    values = []
    for secret in TeamSecret.objects.filter(team=team):
        try:
            values.append(secret_unseal(team_id=team.pk, name=secret.name, ciphertext=secret.ciphertext))
        except ValueError:
            continue
    return values
