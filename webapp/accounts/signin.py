"""Sign-in attempts counted in the cache: too many failures for one username from one address, or from one address
over all usernames, refuse further attempts (right password or not) for a while, with a message saying how long.

The counts live in Django's cache: Redis in a deployment (DJANGO_CACHE_URL), so every web process sees them.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from rest_framework.throttling import BaseThrottle

PREFIX = "signin"


def client_address(request: HttpRequest) -> str:
    """The client's address as the API's rate limits see it (settings.NUM_PROXIES hops back)."""
    return BaseThrottle().get_ident(request)  # type: ignore[arg-type]


def _keys(request: HttpRequest, username: str) -> tuple[str, str]:
    address = hashlib.sha256(client_address(request).encode()).hexdigest()[:32]
    name = hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]
    return f"{PREFIX}:{name}:{address}", f"{PREFIX}:*:{address}"


def signin_refusal(request: HttpRequest, username: str) -> str | None:
    """Why this attempt is refused before the password is checked, or None when it may go ahead."""
    until = max(cache.get_many([f"{key}:until" for key in _keys(request, username)]).values(), default=None)
    if until is None or until <= time.time():
        return None
    minutes = math.ceil((until - time.time()) / 60)
    return (
        f"Too many failed sign-ins from your address; try again in {minutes} minute{'s' if minutes != 1 else ''}. "
        "An operator can also reset your password."
    )


def signin_failed(request: HttpRequest, username: str) -> None:
    """Count a failure for the username from this address and for the address; at a limit, refuse for the window."""
    window = settings.INSPO_SIGNIN_WINDOW_S
    limits = (settings.INSPO_SIGNIN_MAX_FAILURES, settings.INSPO_SIGNIN_MAX_FAILURES_PER_ADDRESS)
    for key, limit in zip(_keys(request, username), limits, strict=True):
        cache.add(key, 0, timeout=window)
        try:
            failures = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, failures := 1, timeout=window)
        if failures >= limit:
            cache.set(f"{key}:until", time.time() + window, timeout=window)
            cache.delete(key)


def signin_succeeded(request: HttpRequest, username: str) -> None:
    """A right password clears the failures of that username from this address (not the address's own count)."""
    cache.delete(_keys(request, username)[0])
