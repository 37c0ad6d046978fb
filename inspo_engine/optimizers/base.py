"""The optimizer-LLM contract (Completion, OptimizerClient, OptimizerError), budget and retries; knows no provider."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar, runtime_checkable

from inspo_engine.config import OptimizerConfig
from inspo_engine.netpolicy import NetPolicy, transport_error

T = TypeVar("T")

MAX_RETRY_AFTER_S = 300.0
"""Longest server-requested wait (Retry-After) we honour; a longer request is clipped to this."""


@dataclass(frozen=True)
class Completion:
    """One optimizer answer and what it cost."""

    text: str
    model: str
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@runtime_checkable
class OptimizerClient(Protocol):
    """Anything that turns a prompt (and an optional system instruction) into one Completion."""

    model: str

    def complete(self, prompt: str, *, system: str | None = None) -> Completion: ...


class OptimizerError(RuntimeError):
    """The call failed for good: retries used up, a non-retryable error (4xx but 429), or an empty/malformed answer."""


@dataclass
class OptimizerBudget:
    """Calls and tokens spent on the optimizer LLM against optional caps; ``None`` means unlimited."""

    max_calls: int | None
    max_tokens: int | None
    calls: int = 0
    tokens: int = 0

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens", "calls", "tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"OptimizerBudget.{name} must be >= 0, got {value}")

    def exhausted(self) -> bool:
        """True once either cap is reached."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            return True
        return self.max_tokens is not None and self.tokens >= self.max_tokens

    def charge(self, completion: Completion) -> None:
        """Count one successful call and its tokens."""
        self.calls += 1
        self.tokens += completion.total_tokens

    def charge_failure(self) -> None:
        """Count a failed call: it used a call even though no tokens were reported."""
        self.calls += 1

    def to_state(self) -> dict[str, int | None]:
        return {"max_calls": self.max_calls, "max_tokens": self.max_tokens, "calls": self.calls, "tokens": self.tokens}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> OptimizerBudget:
        def optional_int(key: str) -> int | None:
            value = state.get(key)
            return None if value is None else int(value)

        return cls(
            max_calls=optional_int("max_calls"),
            max_tokens=optional_int("max_tokens"),
            calls=int(state.get("calls", 0)),
            tokens=int(state.get("tokens", 0)),
        )


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header in seconds (HTTP dates are ignored); None when absent or unusable."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def backoff_delay(attempt: int, backoff_s: float, retry_after_s: float | None = None) -> float:
    """Delay before retry ``attempt + 1``: backoff_s * 2**attempt, raised to the server's Retry-After (clipped)."""
    delay = backoff_s * (2.0**attempt)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
    return delay


def call_with_retries(
    fn: Callable[[], T],
    *,
    is_retryable: Callable[[Exception], bool],
    max_retries: int,
    backoff_s: float,
    sleep: Callable[[float], None] = time.sleep,
    retry_after: Callable[[Exception], float | None] | None = None,
    label: str = "optimizer call",
    describe: Callable[[Exception], str] | None = None,
) -> T:
    """Run ``fn`` up to ``max_retries + 1`` times, sleeping with exponential backoff between retryable failures.

    Every failure leaves as OptimizerError: an OptimizerError raised by ``fn`` passes through untouched, a
    non-retryable exception is wrapped at once, and the last retryable one is wrapped when the retries run out.
    ``describe`` says what of an exception the message may carry (clients keep servers' bodies out of it).
    """
    say = describe or _describe
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    attempt = 0
    while True:
        try:
            return fn()
        except OptimizerError:
            raise
        except Exception as exc:
            if not is_retryable(exc):
                raise OptimizerError(f"{label} failed (not retryable): {say(exc)}") from exc
            if attempt >= max_retries:
                raise OptimizerError(f"{label} failed after {attempt + 1} attempts: {say(exc)}") from exc
            server_wait = retry_after(exc) if retry_after is not None else None
            sleep(backoff_delay(attempt, backoff_s, server_wait))
            attempt += 1


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


_CONFIG_DEFAULTS = OptimizerConfig()


@dataclass(frozen=True)
class HttpSettings:
    """Everything an HTTP optimizer client (Gemini, OpenAI-compatible) is built from: where it calls, with which key
    and model, how it samples, how long it waits and how it retries. The fields that `OptimizerConfig` also has carry
    its names and defaults, so a run's config maps onto them by name (`from_config`)."""

    model: str = _CONFIG_DEFAULTS.model
    base_url: str | None = None
    """The endpoint; None: the provider's own (Gemini only; an OpenAI-compatible client needs one)."""
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = _CONFIG_DEFAULTS.timeout_s
    max_retries: int = _CONFIG_DEFAULTS.max_retries
    backoff_s: float = _CONFIG_DEFAULTS.backoff_s
    temperature: float = _CONFIG_DEFAULTS.temperature
    max_output_tokens: int = _CONFIG_DEFAULTS.max_output_tokens
    sleep: Callable[[float], None] = time.sleep
    """How a retry waits (tests record the waits instead)."""
    policy: NetPolicy | None = None
    """Checks `base_url` now and every request's URL, when the caller did not choose the URL itself."""

    @classmethod
    def from_config(
        cls, config: OptimizerConfig, *, api_key: str | None = None, policy: NetPolicy | None = None
    ) -> HttpSettings:
        """The settings a run's optimizer config gives, with the key and the policy that the caller holds."""
        return cls(api_key=api_key, policy=policy, **{name: getattr(config, name) for name in CONFIG_SETTINGS})

    def retry(
        self,
        status_of: Callable[[Exception], int | None],
        retry_after: Callable[[Exception], float | None],
        transport_errors: tuple[type[Exception], ...],
    ) -> HttpRetry:
        """The retry wrapper these settings ask for, reading errors as a client says."""
        return HttpRetry(self.max_retries, self.backoff_s, self.sleep, status_of, retry_after, transport_errors)


CONFIG_SETTINGS = tuple(f.name for f in fields(HttpSettings) if f.name in OptimizerConfig.__dataclass_fields__)
"""The HttpSettings that come from a run's OptimizerConfig, under the same names."""


@dataclass(frozen=True)
class HttpRetry:
    """The retry wrapper of the HTTP clients: 429, 5xx, timeouts and connection errors are retried with exponential
    backoff, at least as long as the server asks; every failure leaves as OptimizerError naming the HTTP status (or
    what may be said of the connection), never the server's body. A client says how to read its errors."""

    max_retries: int
    backoff_s: float
    sleep: Callable[[float], None]
    status_of: Callable[[Exception], int | None]
    """The HTTP status an exception carries; None when the request got no answer."""
    retry_after: Callable[[Exception], float | None]
    """The wait (seconds) an answer asked for, if any."""
    transport_errors: tuple[type[Exception], ...]
    """The exceptions of a request that got no answer and may be retried (timeouts, connection errors)."""

    def call(self, fn: Callable[[], T], *, label: str) -> T:
        return call_with_retries(
            fn,
            is_retryable=self.is_retryable,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            sleep=self.sleep,
            retry_after=self.retry_after,
            label=label,
            describe=self.describe,
        )

    def is_retryable(self, exc: Exception) -> bool:
        status = self.status_of(exc)
        if status is not None:
            return status == 429 or 500 <= status <= 599
        return isinstance(exc, self.transport_errors)

    def describe(self, exc: Exception) -> str:
        status = self.status_of(exc)
        return f"HTTP {status}" if status is not None else transport_error(exc)
