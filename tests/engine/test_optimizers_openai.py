"""OpenAICompatibleClient against a local HTTP stub that speaks the chat-completions wire format."""

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
from inspo_engine.optimizers import HttpSettings, OpenAICompatibleClient, OptimizerError, build_optimizer

PATH = "/v1/chat/completions"


def chat_answer(
    content: str | None = "Better instruction.", prompt_tokens: int = 20, completion_tokens: int = 5
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def chat_error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


class Sleeps(list[float]):
    """Records the waits the client asks for instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make_client(server: HTTPServer, sleeps: Sleeps, **overrides: Any) -> OpenAICompatibleClient:
    options: dict[str, Any] = {"base_url": server.url_for("/v1"), "model": "qwen2.5-7b-instruct", "backoff_s": 0.5}
    options.update(overrides)
    return OpenAICompatibleClient(HttpSettings(sleep=sleeps, **options))


def test_it_returns_the_answer_with_its_token_counts(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(chat_answer("Try harder.", 20, 5))

    completion = make_client(httpserver, sleeps).complete("Improve this instruction.")

    assert completion.text == "Try harder."
    assert completion.model == "qwen2.5-7b-instruct"
    assert (completion.input_tokens, completion.output_tokens, completion.total_tokens) == (20, 5, 25)
    assert sleeps == []


def test_it_sends_model_messages_settings_and_bearer_key(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(chat_answer())
    client = make_client(httpserver, sleeps, api_key="sk-test", temperature=0.3, max_output_tokens=77)

    client.complete("Rewrite the instruction.", system="You are an instruction optimizer.")

    ((request, _),) = httpserver.log
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert json.loads(request.get_data()) == {
        "model": "qwen2.5-7b-instruct",
        "messages": [
            {"role": "system", "content": "You are an instruction optimizer."},
            {"role": "user", "content": "Rewrite the instruction."},
        ],
        "temperature": 0.3,
        "max_tokens": 77,
    }


def test_it_sends_only_the_user_message_and_no_auth_header_by_default(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(chat_answer())

    make_client(httpserver, sleeps).complete("Hello")

    request = httpserver.log[0][0]
    assert "Authorization" not in request.headers
    assert json.loads(request.get_data())["messages"] == [{"role": "user", "content": "Hello"}]


def test_a_trailing_slash_in_base_url_does_not_double_the_slash(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(chat_answer())

    make_client(httpserver, sleeps, base_url=httpserver.url_for("/v1/")).complete("Hello")

    assert httpserver.log[0][0].path == PATH


def test_it_reports_zero_tokens_and_the_configured_model_when_the_server_omits_them(
    httpserver: HTTPServer, sleeps: Sleeps
) -> None:
    answer = chat_answer()
    del answer["usage"], answer["model"]
    httpserver.expect_oneshot_request(PATH, method="POST").respond_with_json(answer)

    completion = make_client(httpserver, sleeps, model="my-model").complete("Hello")

    assert (completion.model, completion.input_tokens, completion.output_tokens) == ("my-model", 0, 0)


def test_it_retries_after_a_429_and_returns_the_answer(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        chat_error("Rate limit reached", "rate_limit_error"), status=429
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(chat_answer("Second try."))

    completion = make_client(httpserver, sleeps, backoff_s=0.5).complete("Hello")

    assert completion.text == "Second try."
    assert len(httpserver.log) == 2
    assert sleeps == [0.5]
    httpserver.check_assertions()


def test_it_waits_at_least_as_long_as_the_retry_after_header_asks(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        chat_error("slow down", "rate_limit_error"), status=429, headers={"Retry-After": "4.5"}
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(chat_answer())

    make_client(httpserver, sleeps, backoff_s=0.5).complete("Hello")

    assert sleeps == [4.5]


def test_a_retry_after_shorter_than_the_backoff_does_not_shorten_it(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    for _ in range(2):
        httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
            chat_error("busy"), status=503, headers={"Retry-After": "1"}
        )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(chat_answer())

    make_client(httpserver, sleeps, backoff_s=1.5).complete("Hello")

    assert sleeps == [1.5, 3.0]


def test_it_gives_up_with_optimizer_error_after_max_retries_of_500s(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(chat_error("internal"), status=500)

    with pytest.raises(OptimizerError, match="3 attempts"):
        make_client(httpserver, sleeps, max_retries=2, backoff_s=2.0).complete("Hello")

    assert len(httpserver.log) == 3
    assert sleeps == [2.0, 4.0]


def test_it_fails_at_once_on_a_400_without_retrying(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        chat_error("model 'nope' does not exist", "invalid_request_error"), status=400
    )

    with pytest.raises(OptimizerError, match="HTTP 400") as raised:
        make_client(httpserver, sleeps).complete("Hello")

    assert "does not exist" not in str(raised.value)  # the server's words are never echoed

    assert len(httpserver.log) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"object": "chat.completion"}, "without choices"),
        ({"choices": []}, "without choices"),
        ({"choices": [{"index": 0, "finish_reason": "length"}]}, "length"),
        (chat_answer(content=None), "empty answer"),
        (chat_answer(content="  \n"), "empty answer"),
        ([1, 2, 3], "without choices"),
    ],
    ids=["no-choices", "empty-choices", "no-message", "null-content", "blank-content", "json-list"],
)
def test_an_answer_without_text_raises_optimizer_error(
    httpserver: HTTPServer, sleeps: Sleeps, answer: Any, message: str
) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(answer)

    with pytest.raises(OptimizerError, match=message):
        make_client(httpserver, sleeps).complete("Hello")

    assert len(httpserver.log) == 1


def test_a_200_that_is_not_json_raises_optimizer_error(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_data("<html>oops</html>", content_type="text/html")

    with pytest.raises(OptimizerError, match="not JSON"):
        make_client(httpserver, sleeps).complete("Hello")

    assert len(httpserver.log) == 1


def test_it_retries_connection_errors_and_then_gives_up(sleeps: Sleeps) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAICompatibleClient(
        HttpSettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=1.0, sleep=sleeps)
    )

    with pytest.raises(OptimizerError, match="2 attempts"):
        client.complete("Hello")

    assert sleeps == [1.0]


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
        return Response(json.dumps(chat_answer("After timeout.")), content_type="application/json")

    threaded_server.expect_request(PATH, method="POST").respond_with_handler(slow_then_fast)

    completion = make_client(threaded_server, sleeps, timeout_s=0.25, backoff_s=0.5).complete("Hello")

    assert completion.text == "After timeout."
    assert len(calls) == 2
    assert sleeps == [0.5]


def test_build_optimizer_makes_an_openai_compatible_client_from_the_config(httpserver: HTTPServer) -> None:
    config = OptimizerConfig(provider="openai", model="qwen2.5-7b-instruct", base_url=httpserver.url_for("/v1"))

    client = build_optimizer(config, api_key=None)

    assert isinstance(client, OpenAICompatibleClient)
    assert client.model == "qwen2.5-7b-instruct"


def test_build_optimizer_hands_the_configs_sampling_and_retry_settings_to_the_client(httpserver: HTTPServer) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json({"error": "busy"}, status=503)
    config = OptimizerConfig(
        provider="openai",
        model="m",
        base_url=httpserver.url_for("/v1"),
        temperature=0.3,
        max_output_tokens=77,
        max_retries=0,
    )

    with pytest.raises(OptimizerError, match="after 1 attempts: HTTP 503"):
        build_optimizer(config).complete("Hello")

    body = json.loads(httpserver.log[0][0].get_data())
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("m", 0.3, 77)


def test_build_optimizer_refuses_openai_without_a_base_url() -> None:
    with pytest.raises(ValueError, match="base_url"):
        build_optimizer(OptimizerConfig(provider="openai", base_url=None), api_key="sk-test")


# -- URLs a user chose -------------------------------------------------------------------------------------------


def test_a_base_url_the_policy_refuses_gets_no_request_and_no_key(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_json(chat_answer())
    with pytest.raises(UrlRefused, match=r"loopback|allow-list"):
        make_client(httpserver, sleeps, api_key="sk-server", policy=NetPolicy(allowed_hosts=("localhost",)))
    assert httpserver.log == []


def test_a_redirect_is_not_followed(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_data(
        "", status=307, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
    )
    policy = NetPolicy(private_hosts=(f"localhost:{httpserver.port}",))
    with pytest.raises(OptimizerError, match="HTTP 307"):
        make_client(httpserver, sleeps, max_retries=0, policy=policy).complete("Hello")
    assert len(httpserver.log) == 1


@pytest.mark.parametrize(
    "respond",
    [
        lambda r: r.respond_with_data("secret internal detail", status=503),
        lambda r: r.respond_with_data("secret internal detail", content_type="text/plain"),
        lambda r: r.respond_with_json({"secret internal detail": 1}),
    ],
    ids=["status", "not-json", "no-choices"],
)
def test_what_the_server_wrote_is_never_echoed(httpserver: HTTPServer, sleeps: Sleeps, respond: Any) -> None:
    respond(httpserver.expect_request(PATH, method="POST"))
    with pytest.raises(OptimizerError) as raised:
        make_client(httpserver, sleeps, max_retries=0).complete("Hello")
    assert "secret internal detail" not in str(raised.value)
