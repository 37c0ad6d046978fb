"""The Gemini optimizer client on the google-genai SDK; it knows the Gemini API, not budgets or prompts."""

from __future__ import annotations

import re
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from inspo_engine.netpolicy import check_url, guarded_client
from inspo_engine.optimizers.base import Completion, HttpSettings, OptimizerError, parse_retry_after

GEMINI_API_VERSION = "v1beta"
"""Pinned so the request path never depends on the SDK's default (v1 since google-genai 3) or on
GOOGLE_GENAI_API_VERSION; v1beta also serves the ``*-latest`` model aliases."""

_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


def _transport_errors() -> tuple[type[Exception], ...]:
    """Timeouts and network failures of httpx and of httpx2 (the SDK's default transport since version 3)."""
    found: list[type[Exception]] = [httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError]
    try:
        import httpx2
    except ImportError:  # pragma: no cover - httpx2 ships with google-genai>=3
        return tuple(found)
    found += [httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError]
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()


class GeminiClient:
    """Calls ``models.generate_content`` and retries 429, 5xx, timeouts and connection errors itself.

    The SDK's own retries are switched off (one attempt per SDK call), so each HTTP request is one of ours. It sends
    through our own httpx client, which never follows redirects and, with a `policy`, checks every request's URL.
    Errors carry the HTTP status, never the server's message.
    """

    def __init__(self, settings: HttpSettings) -> None:
        if not settings.api_key:
            raise ValueError("GeminiClient needs a non-empty api_key")
        if settings.policy is not None and settings.base_url:
            check_url(settings.base_url, settings.policy)
        self.model = settings.model
        self.temperature = settings.temperature
        self.max_output_tokens = settings.max_output_tokens
        self._retry = settings.retry(_status, _retry_after, _TRANSPORT_ERRORS)
        self._http = guarded_client(settings.policy, timeout=settings.timeout_s)
        http_options = types.HttpOptions(
            base_url=settings.base_url,
            api_version=GEMINI_API_VERSION,
            timeout=max(1, round(settings.timeout_s * 1000)),
            retry_options=types.HttpRetryOptions(attempts=1),
            httpx_client=self._http,
        )
        self._client = genai.Client(api_key=settings.api_key, vertexai=False, http_options=http_options)

    def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        config = types.GenerateContentConfig(
            system_instruction=system,
            temperature=self.temperature,
            max_output_tokens=self.max_output_tokens,
        )

        def once() -> Completion:
            response = self._client.models.generate_content(model=self.model, contents=prompt, config=config)
            return self._to_completion(response)

        return self._retry.call(once, label=f"Gemini call to {self.model}")

    def close(self) -> None:
        """Release the SDK's HTTP connections."""
        self._client.close()
        self._http.close()

    def _to_completion(self, response: types.GenerateContentResponse) -> Completion:
        text = _answer_text(response)
        usage = response.usage_metadata
        input_tokens = (usage.prompt_token_count or 0) if usage else 0
        output_tokens = ((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)) if usage else 0
        return Completion(
            text=text,
            model=response.model_version or self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )


def _answer_text(response: types.GenerateContentResponse) -> str:
    """The visible text of the first candidate; OptimizerError when there is none, naming why."""
    if not response.candidates:
        feedback = response.prompt_feedback
        reason = _enum_name(feedback.block_reason) if feedback is not None else None
        detail = f"prompt blocked: {reason}" if reason else "no block reason given"
        raise OptimizerError(f"Gemini returned no candidates ({detail})")
    candidate = response.candidates[0]
    parts = candidate.content.parts if candidate.content is not None else None
    texts = [part.text for part in parts or [] if part.text and not part.thought]
    text = "".join(texts)
    if not text.strip():
        reason = _enum_name(candidate.finish_reason) or "none given"
        raise OptimizerError(f"Gemini returned an empty answer (finish reason: {reason})")
    return text


def _enum_name(value: Any) -> str | None:
    """An enum's name as the API spells it (SAFETY, MAX_TOKENS); anything else the server wrote is not repeated."""
    if value is None:
        return None
    text = str(getattr(value, "value", value))
    return text if re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", text) else "unrecognised"


def _status(exc: Exception) -> int | None:
    return exc.code if isinstance(exc, errors.APIError) else None


def _retry_after(exc: Exception) -> float | None:
    """The wait the server asked for: a Retry-After header, else a google.rpc.RetryInfo ``retryDelay`` ("13s")."""
    if not isinstance(exc, errors.APIError):
        return None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        from_header = parse_retry_after(headers.get("retry-after"))
        if from_header is not None:
            return from_header
    return _retry_info_delay(exc.details)


def _retry_info_delay(details: Any) -> float | None:
    error = details.get("error") if isinstance(details, dict) else None
    entries = error.get("details") if isinstance(error, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("@type") == _RETRY_INFO_TYPE:
            match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", str(entry.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
