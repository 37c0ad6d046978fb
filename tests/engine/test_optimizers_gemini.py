"""GeminiClient against a local HTTP stub that speaks the Gemini REST wire format; the real google-genai SDK sends."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from inspo_engine.config import OptimizerConfig
from inspo_engine.netpolicy import NetPolicy, UrlRefused
from inspo_engine.optimizers import GeminiClient, HttpSettings, OptimizerError, build_optimizer

PATH = "/v1beta/models/gemini-2.5-pro:generateContent"


def gemini_answer(text: str = "Better instruction.", prompt_tokens: int = 11, output_tokens: int = 4) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
        "modelVersion": "gemini-2.5-pro",
    }


def gemini_error(code: int, status: str, message: str = "boom") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


class Sleeps(list[float]):
    """Records the waits the client asks for instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make_client(server: HTTPServer, sleeps: Sleeps, **overrides: Any) -> GeminiClient:
    options: dict[str, Any] = {"api_key": "test-key", "base_url": server.url_for("/"), "backoff_s": 0.5}
    options.update(overrides)
    return GeminiClient(HttpSettings(sleep=sleeps, **options))


def test_it_returns_the_answer_with_its_token_counts(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(gemini_answer("Try harder.", 11, 4))

    completion = make_client(httpserver, sleeps).complete("Improve this instruction.")

    assert completion.text == "Try harder."
    assert completion.model == "gemini-2.5-pro"
    assert (completion.input_tokens, completion.output_tokens, completion.total_tokens) == (11, 4, 15)
    assert sleeps == []


def test_it_sends_model_prompt_system_instruction_settings_and_api_key(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(gemini_answer())
    client = make_client(httpserver, sleeps, temperature=0.7, max_output_tokens=321)

    client.complete("Rewrite the instruction.", system="You are an instruction optimizer.")

    ((request, _),) = httpserver.log
    assert request.path == PATH
    assert request.headers["x-goog-api-key"] == "test-key"
    body = json.loads(request.get_data())
    assert body["contents"] == [{"parts": [{"text": "Rewrite the instruction."}], "role": "user"}]
    assert body["systemInstruction"]["parts"] == [{"text": "You are an instruction optimizer."}]
    assert body["generationConfig"] == {"temperature": 0.7, "maxOutputTokens": 321}


def test_it_leaves_out_the_system_instruction_when_none_is_given(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(gemini_answer())

    make_client(httpserver, sleeps).complete("Hello")

    body = json.loads(httpserver.log[0][0].get_data())
    assert "systemInstruction" not in body


def test_it_uses_the_configured_model_in_the_path(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    httpserver.expect_oneshot_request(path, method="POST").respond_with_json(gemini_answer())

    make_client(httpserver, sleeps, model="gemini-2.5-flash").complete("Hello")

    assert httpserver.log[0][0].path == path


def test_thinking_tokens_count_as_output_and_thought_parts_are_not_part_of_the_answer(
    httpserver: HTTPServer, sleeps: Sleeps
) -> None:
    answer = gemini_answer()
    answer["candidates"][0]["content"]["parts"] = [{"text": "Let me think...", "thought": True}, {"text": "Final."}]
    answer["usageMetadata"]["thoughtsTokenCount"] = 100
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(answer)

    completion = make_client(httpserver, sleeps).complete("Hello")

    assert completion.text == "Final."
    assert completion.output_tokens == 4 + 100


def test_it_reports_zero_tokens_when_usage_metadata_is_missing(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    answer = gemini_answer()
    del answer["usageMetadata"]
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(answer)

    completion = make_client(httpserver, sleeps).complete("Hello")

    assert (completion.input_tokens, completion.output_tokens) == (0, 0)


def test_it_retries_after_a_429_and_returns_the_answer(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        gemini_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted"), status=429
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(gemini_answer("Second try."))

    completion = make_client(httpserver, sleeps, backoff_s=0.5).complete("Hello")

    assert completion.text == "Second try."
    assert len(httpserver.log) == 2
    assert sleeps == [0.5]
    httpserver.check_assertions()


def test_it_waits_at_least_as_long_as_the_retry_after_header_asks(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        gemini_error(429, "RESOURCE_EXHAUSTED"), status=429, headers={"Retry-After": "7"}
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(gemini_answer())

    make_client(httpserver, sleeps, backoff_s=0.5).complete("Hello")

    assert sleeps == [7.0]


def test_it_honours_the_retry_delay_in_a_retry_info_detail(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    error = gemini_error(429, "RESOURCE_EXHAUSTED")
    error["error"]["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "13s"}]
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(error, status=429)
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(gemini_answer())

    make_client(httpserver, sleeps, backoff_s=0.5).complete("Hello")

    assert sleeps == [13.0]


def test_it_gives_up_with_optimizer_error_after_max_retries_of_500s(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(gemini_error(500, "INTERNAL"), status=500)

    with pytest.raises(OptimizerError, match="4 attempts"):
        make_client(httpserver, sleeps, max_retries=3, backoff_s=0.5).complete("Hello")

    assert len(httpserver.log) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_it_fails_at_once_on_a_400_without_retrying(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        gemini_error(400, "INVALID_ARGUMENT", "API key not valid"), status=400
    )

    with pytest.raises(OptimizerError, match="HTTP 400") as raised:
        make_client(httpserver, sleeps).complete("Hello")

    assert "API key not valid" not in str(raised.value)  # the server's words are never echoed

    assert len(httpserver.log) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}, "no candidates"),
        ({"promptFeedback": {"blockReason": "SAFETY"}}, "SAFETY"),
        ({"candidates": [{"content": {"parts": [], "role": "model"}, "finishReason": "MAX_TOKENS"}]}, "MAX_TOKENS"),
        ({"candidates": [{"finishReason": "RECITATION", "index": 0}]}, "RECITATION"),
        ({"candidates": [{"content": {"parts": [{"text": "   "}], "role": "model"}}]}, "empty answer"),
    ],
    ids=["no-candidates", "blocked-prompt", "empty-parts", "no-content", "blank-text"],
)
def test_an_answer_without_text_raises_optimizer_error_naming_why(
    httpserver: HTTPServer, sleeps: Sleeps, answer: dict[str, Any], message: str
) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(answer)

    with pytest.raises(OptimizerError, match=message):
        make_client(httpserver, sleeps).complete("Hello")

    assert len(httpserver.log) == 1


def test_a_200_that_is_not_json_raises_optimizer_error(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_data("<html>oops</html>", content_type="text/html")

    with pytest.raises(OptimizerError):
        make_client(httpserver, sleeps).complete("Hello")

    assert len(httpserver.log) == 1


def test_it_retries_connection_errors_and_then_gives_up(sleeps: Sleeps) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = GeminiClient(
        HttpSettings(api_key="k", base_url=f"http://127.0.0.1:{port}/", max_retries=2, backoff_s=1.0, sleep=sleeps)
    )

    with pytest.raises(OptimizerError, match="3 attempts"):
        client.complete("Hello")

    assert sleeps == [1.0, 2.0]


@pytest.fixture
def threaded_server() -> Iterator[HTTPServer]:
    server = HTTPServer(threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.mark.slow
def test_it_retries_a_request_that_timed_out(threaded_server: HTTPServer, sleeps: Sleeps) -> None:
    calls: list[float] = []
    lock = threading.Lock()

    def slow_then_fast(request: Request) -> Response:
        with lock:
            calls.append(time.monotonic())
            first = len(calls) == 1
        if first:
            time.sleep(1.0)
        return Response(json.dumps(gemini_answer("After timeout.")), content_type="application/json")

    threaded_server.expect_request(PATH, method="POST").respond_with_handler(slow_then_fast)
    client = make_client(threaded_server, sleeps, timeout_s=0.25, backoff_s=0.5)

    completion = client.complete("Hello")

    assert completion.text == "After timeout."
    assert len(calls) == 2
    assert sleeps == [0.5]


def test_build_optimizer_makes_a_gemini_client_from_the_config(httpserver: HTTPServer) -> None:
    config = OptimizerConfig(provider="gemini", model="gemini-2.5-pro", base_url=httpserver.url_for("/"))

    client = build_optimizer(config, api_key="test-key")

    assert isinstance(client, GeminiClient)
    assert client.model == "gemini-2.5-pro"


def test_build_optimizer_hands_the_configs_sampling_and_retry_settings_to_the_client(httpserver: HTTPServer) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(gemini_error(503, "UNAVAILABLE"), status=503)
    config = OptimizerConfig(
        provider="gemini", base_url=httpserver.url_for("/"), temperature=0.3, max_output_tokens=77, max_retries=0
    )

    with pytest.raises(OptimizerError, match="after 1 attempts: HTTP 503"):
        build_optimizer(config, api_key="test-key").complete("Hello")

    body = json.loads(httpserver.log[0][0].get_data())
    assert body["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 77}


def test_build_optimizer_refuses_gemini_without_an_api_key_and_names_the_way_out() -> None:
    with pytest.raises(ValueError, match="GEMINI_API_KEY") as raised:
        build_optimizer(OptimizerConfig(provider="gemini"), api_key=None)

    assert '"local"' in str(raised.value)


# -- URLs a user chose -------------------------------------------------------------------------------------------


def test_a_base_url_the_policy_refuses_gets_no_request_and_no_key(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(gemini_answer())
    with pytest.raises(UrlRefused, match="allow-list"):
        make_client(httpserver, sleeps, policy=NetPolicy(allowed_hosts=("generativelanguage.googleapis.com",)))
    assert httpserver.log == []


def test_a_redirect_is_not_followed_so_the_key_goes_nowhere_else(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_data(
        "", status=307, headers={"Location": httpserver.url_for("/elsewhere")}
    )
    httpserver.expect_request("/elsewhere").respond_with_json(gemini_answer())
    policy = NetPolicy(private_hosts=(f"localhost:{httpserver.port}",))
    with pytest.raises(OptimizerError):
        make_client(httpserver, sleeps, max_retries=0, policy=policy).complete("Hello")
    assert [request.path for request, _ in httpserver.log] == [PATH]


def test_a_server_error_body_is_never_echoed(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        gemini_error(500, "INTERNAL", "internal detail: db=postgres://admin@10.0.0.3"), status=500
    )
    with pytest.raises(OptimizerError, match="HTTP 500") as raised:
        make_client(httpserver, sleeps, max_retries=0).complete("Hello")
    assert "internal detail" not in str(raised.value) and "10.0.0.3" not in str(raised.value)
