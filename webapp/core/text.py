"""Checks on text PostgreSQL can store: its text and jsonb types refuse NUL characters."""

from __future__ import annotations

from typing import Any


def has_nul(value: Any) -> bool:
    """True when a string anywhere in `value` (keys included) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(v) for v in value)
    return False
