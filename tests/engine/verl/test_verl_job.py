"""The verl job's run as `verl_job.build_loop` wires it through `build.build_run`: from the command line the launcher
prepares (composed by Hydra against verl's own yaml, as the job composes it) to the optimizer client, which checks
the base URL against the network policy the worker gave the job, once when it is built and again on every request."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from tests.engine.verl._support import require_verl

require_verl()

from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.launcher import prepare  # noqa: E402
from inspo_engine.backends.verl.loop import VerlLoop  # noqa: E402
from inspo_engine.environ import API_KEY_VARIABLE, CACHE_DIR_VARIABLE  # noqa: E402
from inspo_engine.netpolicy import NetPolicy, UrlRefused  # noqa: E402
from inspo_engine.optimizers import OpenAICompatibleClient, OptimizerError  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402
from inspo_engine.verl_job import build_loop  # noqa: E402

pytest.importorskip("pandas")

REBOUND = "optimizer.example"
"""A host name whose answer a test changes between the client's first check and its request."""


def openai_config(base_url: str) -> Any:
    """The smoke preset on the verl backend, its optimizer an OpenAI-compatible endpoint the run chose."""
    return preset("smoke").with_overrides(
        {
            "backend.name": "verl",
            "env.retriever": "remote",
            "env.retriever_url": "http://127.0.0.1:9/retrieve",
            "optimizer.provider": "openai",
            "optimizer.model": "qwen2.5-7b-instruct",
            "optimizer.base_url": base_url,
            "optimizer.max_retries": 0,
            "optimizer.timeout_s": 5,
        }
    )


def job_loop(config: Any, out_dir: Path, policy: NetPolicy | None) -> VerlLoop:
    """What the job builds: the launcher's command line composed as verl composes it, a trainer and a dataset."""
    job = prepare(config, out_dir, optimizer_policy=policy)
    verl_config = compose(job.argv[3:])  # after `python -m <module>`
    trainer = SimpleNamespace(config=verl_config, async_rollout_manager=None)
    extra_info = [{"question_id": f"q{i}", "question": f"Question {i}?", "golden_answers": [f"a{i}"]} for i in range(4)]
    return build_loop(verl_config, trainer, SimpleNamespace(dataframe={"extra_info": extra_info}))


@pytest.fixture(autouse=True)
def job_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The job's environment: the one key its caller gave it, and a cache directory."""
    monkeypatch.setenv(API_KEY_VARIABLE, "sk-team")
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "cache"))


def chat_answer(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}], "usage": {}}


def test_the_policy_the_worker_gave_reaches_the_jobs_optimizer_client(httpserver: HTTPServer, tmp_path: Path) -> None:
    httpserver.expect_oneshot_request("/v1/chat/completions", method="POST").respond_with_json(chat_answer("Better."))
    policy = NetPolicy(allowed_hosts=("*.example.com",), private_hosts=(f"localhost:{httpserver.port}",))
    loop = job_loop(openai_config(httpserver.url_for("/v1")), tmp_path / "run", policy)
    client = loop.coevolution.optimizer
    assert isinstance(client, OpenAICompatibleClient)
    assert client.complete("Improve this instruction.").text == "Better."
    ((request, _),) = httpserver.log
    assert request.headers["Authorization"] == "Bearer sk-team"


def test_the_jobs_optimizer_client_refuses_an_address_the_policy_forbids(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    policy = NetPolicy(allowed_hosts=("localhost",))  # named, but not allowed to be a loopback address
    with pytest.raises(UrlRefused, match="loopback"):
        job_loop(openai_config(httpserver.url_for("/v1")), tmp_path / "run", policy)
    assert httpserver.log == []


def test_the_jobs_optimizer_client_checks_every_request_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The host answers with a public address when the client is built and with the metadata service's when the
    request goes out (DNS rebinding): the request is refused before anything connects."""
    answers = iter(["93.184.216.34", "169.254.169.254"])
    system = socket.getaddrinfo

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != REBOUND:
            return system(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    policy = NetPolicy(allowed_hosts=(REBOUND,))
    loop = job_loop(openai_config(f"http://{REBOUND}/v1"), tmp_path / "run", policy)
    with pytest.raises(OptimizerError, match=r"refused by the network policy.*169\.254\.169\.254"):
        loop.coevolution.optimizer.complete("Improve this instruction.")  # type: ignore[union-attr]


def test_without_a_policy_the_job_trusts_the_operators_url(tmp_path: Path) -> None:
    """An operator's endpoint (the worker passes no policy) may be on the operator's own network."""
    config = openai_config("http://127.0.0.1:9/v1")
    assert not any("optimizer_policy" in arg for arg in prepare(config, tmp_path / "bare").argv)
    loop = job_loop(config, tmp_path / "run", None)
    assert isinstance(loop.coevolution.optimizer, OpenAICompatibleClient)
