"""An optimizer client for any OpenAI-compatible ``/chat/completions`` endpoint over httpx; no SDK, no budgets."""

from __future__ import annotations

import json
from typing import Any

import httpx

from inspo_engine.netpolicy import check_url, guarded_client
from inspo_engine.optimizers.base import Completion, HttpSettings, OptimizerError, parse_retry_after

_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class _StatusError(Exception):
    """A non-2xx answer; keeps the response for the retry decision. The message is the status only: the body is
    the server's text, which is never echoed."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


class OpenAICompatibleClient:
    """POSTs chat completions (vLLM, SGLang, llama.cpp, OpenAI...); retries 429, 5xx, timeouts and connection errors.

    With a `policy` the URL is checked now and on every request; redirects are never followed.
    """

    def __init__(self, settings: HttpSettings) -> None:
        if not settings.base_url:
            raise ValueError("OpenAICompatibleClient needs a base_url such as http://host:8000/v1")
        self.model = settings.model
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        if settings.policy is not None:
            check_url(self.url, settings.policy)
        self.temperature = settings.temperature
        self.max_output_tokens = settings.max_output_tokens
        self._retry = settings.retry(_status, _retry_after, _TRANSPORT_ERRORS)
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = guarded_client(settings.policy, timeout=settings.timeout_s, headers=headers)

    def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        messages: list[dict[str, str]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_output_tokens,
        }

        def once() -> Completion:
            response = self._http.post(self.url, json=body)
            if not response.is_success:
                raise _StatusError(response)
            return self._to_completion(response)

        return self._retry.call(once, label=f"chat completion from {self.model} at {self.url}")

    def close(self) -> None:
        """Release the HTTP connections."""
        self._http.close()

    def _to_completion(self, response: httpx.Response) -> Completion:
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OptimizerError("the endpoint answered with something that is not JSON") from exc
        text = _answer_text(payload)
        usage = payload.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return Completion(
            text=text,
            model=str(payload.get("model") or self.model),
            input_tokens=_token_count(usage, "prompt_tokens"),
            output_tokens=_token_count(usage, "completion_tokens"),
        )


def _answer_text(payload: Any) -> str:
    """choices[0].message.content; OptimizerError when it is missing or blank, naming the finish reason."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise OptimizerError("the endpoint answered without choices")
    choice = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise OptimizerError(f"the endpoint returned an empty answer (finish reason: {_finish_reason(choice)})")
    return content


def _finish_reason(choice: dict[str, Any]) -> str:
    """The finish reason when it is one of the standard ones; the server's own words are not repeated."""
    reason = choice.get("finish_reason")
    return reason if reason in ("stop", "length", "content_filter", "tool_calls", "function_call") else "none given"


def _token_count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def _status(exc: Exception) -> int | None:
    return exc.response.status_code if isinstance(exc, _StatusError) else None


def _retry_after(exc: Exception) -> float | None:
    if isinstance(exc, _StatusError):
        return parse_retry_after(exc.response.headers.get("retry-after"))
    return None
