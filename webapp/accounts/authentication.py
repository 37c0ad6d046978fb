"""API token authentication: DRF's `Authorization: Token <key>` scheme, looked up by the key's SHA-256."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from .models import ApiToken

LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiTokenAuthentication(TokenAuthentication):
    keyword = "Token"
    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        token = ApiToken.objects.select_related("user").filter(digest=token_digest(key)).first()
        if token is None:
            raise exceptions.AuthenticationFailed("invalid token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("user inactive or deleted")
        now = timezone.now()
        if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
            # Conditional, so that concurrent requests with one token write it once per resolution.
            stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
            ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)
        return token.user, token
