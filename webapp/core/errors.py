"""Errors services raise; pages and the API turn them into messages and status codes. No Django imports."""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service refuses; `status` is the HTTP status the API answers with."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Conflict(ServiceError):
    """The object is in a state that does not allow the operation (cancel a finished run, resume a queued one)."""

    status = 409


class Gone(ServiceError):
    """The object's files no longer exist (an old checkpoint its run deleted)."""

    status = 410


class Unavailable(ServiceError):
    """A service the platform runs beside the web app (the retrieval service) does not answer."""

    status = 503


class QuotaExceeded(ServiceError):
    """The team has used up one of its quotas (active runs); the message says the quota and the usage."""

    status = 429


class InvalidInput(ServiceError):
    """Input failed validation; `errors` maps each field (a dotted config path for configs) to its messages."""

    def __init__(self, errors: dict[str, list[str]], *, key: str | None = None) -> None:
        super().__init__("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items()))
        self.errors = errors
        self.key = key

    def as_dict(self) -> dict[str, object]:
        """`{key: {field: [...]}}` when the errors belong under one input (e.g. `config`), else `{field: [...]}`."""
        return {self.key: self.errors} if self.key else dict(self.errors)
