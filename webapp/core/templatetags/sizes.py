"""`binary_size`: a byte count as the pages print it, in the binary units its number is in (KiB, MiB, GiB, TiB),
where Django's `filesizeformat` prints "MB" for 2^20 bytes; a non-breaking space keeps number and unit together, as
there. Load it with `{% load sizes %}`."""

from __future__ import annotations

from django import template

register = template.Library()

UNITS = ("KiB", "MiB", "GiB", "TiB")


@register.filter
def binary_size(value: object) -> str:
    """
    >>> binary_size(512), binary_size(1536), binary_size(16446976), binary_size(3 * 2**30), binary_size(None)
    ('512\xa0bytes', '1.5\xa0KiB', '15.7\xa0MiB', '3.0\xa0GiB', '0\xa0bytes')
    """
    try:
        size = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        size = 0.0
    if abs(size) < 1024:
        count = int(size)
        return f"{count}\u00a0byte{'' if count == 1 else 's'}"
    for unit in UNITS:
        size /= 1024
        if abs(size) < 1024 or unit == UNITS[-1]:
            return f"{size:.1f}\u00a0{unit}"
    raise AssertionError("unreachable")
