"""Secret values out of what a run stores and logs: events (every string in them, however deep) and log lines; it
knows no secret store (the caller passes the values) and no sink beyond the one it wraps.

A last line of defence: errors already name URLs and statuses, never what a foreign server wrote, but a library's
exception may still carry a header or a key; whatever reaches a note, a table or a log line passes through here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any, TypeVar

from .events import Event, EventSink

MASK = "[redacted]"
MIN_SECRET_CHARS = 4
"""Shorter values are not masked: a 1–3 character "secret" would blank ordinary words (and is no secret)."""

T = TypeVar("T")


class Redactor:
    """Replaces each of `secrets` (longest first, so a value that contains another is masked whole) by MASK.

    >>> Redactor(["s3cret-token"]).text("401: Authorization: Bearer s3cret-token")
    '401: Authorization: Bearer [redacted]'
    >>> Redactor([]).text("nothing to hide")
    'nothing to hide'
    """

    def __init__(self, secrets: Iterable[str | None]) -> None:
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        self.secrets = sorted(values, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def value(self, value: T) -> T:
        """`value` with every string inside it masked: dataclasses (events and their parts), dicts, lists, tuples."""
        if not self.secrets:
            return value
        return self._value(value)  # type: ignore[no-any-return]

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self._value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
            return dataclasses.replace(value, **changes)
        if isinstance(value, dict):
            return {self._value(k): self._value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._value(v) for v in value)
        return value


class RedactingSink:
    """An EventSink that masks the secrets in every event before `inner` sees it."""

    def __init__(self, inner: EventSink, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor

    def emit(self, event: Event) -> None:
        self.inner.emit(self.redactor.value(event))


class RedactingFilter(logging.Filter):
    """A logging filter that masks the secrets in a record's message and arguments (formatted once, here)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.redactor:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        masked = self.redactor.text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        return True


class redacted_logging:
    """Within the block, every handler of the root logger masks the secrets (records of every logger reach them)."""

    def __init__(self, redactor: Redactor) -> None:
        self.filter = RedactingFilter(redactor)
        self.handlers: list[logging.Handler] = []

    def __enter__(self) -> RedactingFilter:
        self.handlers = list(logging.getLogger().handlers)
        for handler in self.handlers:
            handler.addFilter(self.filter)
        return self.filter

    def __exit__(self, *exc: object) -> None:
        for handler in self.handlers:
            handler.removeFilter(self.filter)
