"""The verl agent loop's /retrieve client under the network policy the worker gives the job: carried on the command
line the launcher prepares (composed by Hydra as the job composes it) into the agent loop, whose client refuses a URL
the policy forbids, reaches one it allows, and checks every request again, so a host whose address changes after the
check (DNS rebinding) is refused before anything connects."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from tests.engine.verl._support import require_verl

require_verl()

from inspo_engine.backends.verl.agent_loop import remote_retriever  # noqa: E402
from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.launcher import RETRIEVER_POLICY, prepare  # noqa: E402
from inspo_engine.env.retrievers import RetrieverError  # noqa: E402
from inspo_engine.netpolicy import NetPolicy, UrlRefused  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402
from tests.engine.verl.fakes import TinyModelServer  # noqa: E402
from tests.engine.verl.test_agent_loop import SAMPLING, make_loop, row  # noqa: E402

pytest.importorskip("pandas")

REBOUND = "retriever.example"
"""A host name whose answer a test changes between the client's first check and its request."""
SEARCH_THEN_ANSWER = ["<think>need it</think><search> capital of Peru </search>", "<answer> Lima </answer>"]


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    """Each test builds its own /retrieve client (the agent loop keeps one per URL and policy in a process)."""
    remote_retriever.cache_clear()
    yield
    remote_retriever.cache_clear()


def job_config(url: str, out_dir: Path, policy: NetPolicy | None) -> Any:
    """The verl config an agent loop of the job sees: the launcher's command line, composed as the job composes it."""
    config = preset("smoke").with_overrides(
        {"backend.name": "verl", "env.retriever": "remote", "env.retriever_url": url}
    )
    job = prepare(config, out_dir, retriever_policy=policy)
    return compose(job.argv[3:])  # after `python -m <module>`


def rollout(config: Any, tiny_model: Any, tokenizer: Any) -> Any:
    """One trajectory that searches once, then answers."""
    loop = make_loop(config, TinyModelServer(tiny_model, tokenizer, SEARCH_THEN_ANSWER), tokenizer)
    return asyncio.run(loop.run(dict(SAMPLING), **row()))


def retrieve_answer(contents: str) -> dict[str, Any]:
    return {"result": [[{"document": {"id": "d1", "contents": contents}, "score": 1.0}]]}


def test_an_allowed_retriever_is_reached_by_the_agent_loop(
    httpserver: HTTPServer, tmp_path: Path, tiny_model: Any, tokenizer: Any
) -> None:
    httpserver.expect_oneshot_request("/retrieve", method="POST").respond_with_json(
        retrieve_answer('"Peru"\nLima is the capital of Peru.')
    )
    policy = NetPolicy(allowed_hosts=("*.example.com",), private_hosts=(f"localhost:{httpserver.port}",))
    out = rollout(job_config(httpserver.url_for("/retrieve"), tmp_path / "run", policy), tiny_model, tokenizer)
    ((request, _),) = httpserver.log
    assert request.json == {"queries": ["capital of Peru"], "topk": 3, "return_scores": True}
    assert "Lima is the capital of Peru." in tokenizer.decode(out.response_ids)
    assert out.extra_fields["inspo_tool_calls"] == 1


def test_a_retriever_address_the_policy_forbids_is_refused_and_never_reached(
    httpserver: HTTPServer, tmp_path: Path, tiny_model: Any, tokenizer: Any
) -> None:
    httpserver.expect_request("/retrieve", method="POST").respond_with_json(retrieve_answer("never read"))
    policy = NetPolicy(allowed_hosts=("localhost",))  # named, but not allowed to be a loopback address
    config = job_config(httpserver.url_for("/retrieve"), tmp_path / "run", policy)
    with pytest.raises(UrlRefused, match="loopback"):
        rollout(config, tiny_model, tokenizer)
    assert httpserver.log == []


def test_a_retriever_host_that_changes_address_after_the_check_is_refused_on_the_request(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model: Any, tokenizer: Any
) -> None:
    """The host answers with a public address when the agent loop builds its client and with the loopback address
    of a listening server when the search goes out: the request is refused and the server never sees it."""
    httpserver.expect_request("/retrieve", method="POST").respond_with_json(retrieve_answer("never read"))
    answers: list[str] = []
    system = socket.getaddrinfo

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != REBOUND:
            return system(host, port, *args, **kwargs)
        answers.append("93.184.216.34" if not answers else "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[-1], port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    policy = NetPolicy(allowed_hosts=(REBOUND,))
    config = job_config(f"http://{REBOUND}:{httpserver.port}/retrieve", tmp_path / "run", policy)
    with pytest.raises(RetrieverError, match=r"refused by the network policy.*127\.0\.0\.1"):
        rollout(config, tiny_model, tokenizer)
    assert answers == ["93.184.216.34", "127.0.0.1"]  # checked when built, and again for the request
    assert httpserver.log == []


def test_no_policy_host_can_become_an_interpolation_in_the_jobs_config(tmp_path: Path) -> None:
    config = preset("smoke").with_overrides(
        {"backend.name": "verl", "env.retriever": "remote", "env.retriever_url": "http://127.0.0.1:9/retrieve"}
    )
    policy = NetPolicy(allowed_hosts=("${oc.env:INSPO_OPTIMIZER_API_KEY}",))
    with pytest.raises(ValueError, match="interpolation"):
        prepare(config, tmp_path / "run", retriever_policy=policy)
    quoted = NetPolicy(allowed_hosts=("a'b]", "$HOME"), private_hosts=("c,d",))
    inspo = job_config("http://127.0.0.1:9/retrieve", tmp_path / "quoted", quoted).inspo
    assert list(inspo[RETRIEVER_POLICY].allowed_hosts) == ["a'b]", "$HOME"]
    assert list(inspo[RETRIEVER_POLICY].private_hosts) == ["c,d"]
