"""The experiment pages' one convention for exact match: EM points (0–100, one decimal), signed where the number is
a difference, as the verdicts write them; and minutes as the timing section prints them. Load it with
`{% load em_points %}`."""

from __future__ import annotations

from django import template

from inspo_engine.stats import MINUS

register = template.Library()


@register.filter
def points(value: object) -> str:
    """An EM (0–1) in EM points.

    >>> points(0.25), points(None)
    ('25.0', '—')
    """
    if not isinstance(value, int | float):
        return "—"
    return f"{round(100 * value, 1) + 0.0:.1f}"


@register.filter
def signed_points(value: object) -> str:
    """A difference in EM (0–1) in signed EM points, with a true minus sign.

    >>> signed_points(0.025), signed_points(-0.01), signed_points(0.0)
    ('+2.5', '−1.0', '+0.0')
    """
    if not isinstance(value, int | float):
        return "—"
    return f"{round(100 * value, 1) + 0.0:+.1f}".replace("-", MINUS)


@register.filter
def minutes(value: object) -> str:
    """Minutes with one decimal, or a dash.

    >>> minutes(4.26), minutes(None)
    ('4.3 min', '—')
    """
    if not isinstance(value, int | float):
        return "—"
    return f"{value:.1f} min"


@register.filter
def signed_minutes(value: object) -> str:
    """
    >>> signed_minutes(-3.04)
    '−3.0 min'
    """
    if not isinstance(value, int | float):
        return "—"
    return f"{value + 0.0:+.1f} min".replace("-", MINUS)
