"""The retrieval service: every index under one root, opened once, searched over Search-R1's /retrieve by concurrent
clients; a bad request is a 4xx that harms nobody else, and a run's client fails clearly when the service is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.env.indexes import CorpusIndex, build_index, corpus_file
from inspo_engine.env.retrievers import RemoteRetriever, RetrieverError
from inspo_engine.env.service import IndexShelf, make_service


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("indexes")
    build_index("bm25", corpus_file("builtin", root), root)
    return root


@pytest.fixture(scope="module")
def service(root: Path) -> Iterator[str]:
    server = make_service(IndexShelf(root), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _name(root: Path) -> str:
    return next(p.name for p in root.glob("bm25-*") if p.is_dir() and not p.name.endswith(".building"))


def test_the_service_answers_as_the_index_itself_would(root: Path, service: str) -> None:
    questions = [q.text for q in builtin_dataset().split("test")[:40]]
    client = RemoteRetriever(f"{service}/indexes/{_name(root)}/retrieve")
    local = CorpusIndex(root / _name(root))
    remote_hits = client.search_with_scores(questions, 3)
    local_hits = local.search_with_scores(questions, 3)
    assert [[p.id for p, _ in hits] for hits in remote_hits] == [[p.id for p, _ in hits] for hits in local_hits]
    assert remote_hits[0][0][0] == local_hits[0][0][0]  # the same passage: id, title and text
    assert [s for _, s in remote_hits[0]] == pytest.approx([s for _, s in local_hits[0]])


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/indexes/{name}/retrieve", b"{not json", 400),
        ("/indexes/{name}/retrieve", b'{"queries": "one string"}', 400),
        ("/indexes/{name}/retrieve", b'{"queries": ["q"], "topk": 100000}', 400),
        ("/indexes/{name}/retrieve", b'{"queries": ["a\\u0000b"]}', 400),
        ("/indexes/{name}/retrieve", b'{"queries": [' + b'"q",' * 1100 + b'"q"]}', 413),
        ("/indexes/bm25-00000000000000000000000000000000/retrieve", b'{"queries": ["q"]}', 404),
        ("/indexes/..%2F..%2Fetc/retrieve", b'{"queries": ["q"]}', 404),
        ("/indexes/../../etc/retrieve", b'{"queries": ["q"]}', 404),
        ("/retrieve/everything", b'{"queries": ["q"]}', 404),
    ],
)
def test_a_bad_request_is_a_clear_4xx(root: Path, service: str, path: str, body: bytes, status: int) -> None:
    response = httpx.post(service + path.format(name=_name(root)), content=body, timeout=10)
    assert response.status_code == status
    assert response.json()["error"]


def test_concurrent_clients_are_served_while_others_send_garbage(root: Path, service: str) -> None:
    url = f"{service}/indexes/{_name(root)}/retrieve"
    questions = [q.text for q in builtin_dataset().split("test")[:8]]
    expected = [p.id for p in RemoteRetriever(url).search(questions, 3)[0]]
    failures: list[str] = []

    def good() -> None:
        client = RemoteRetriever(url)
        for _ in range(10):
            if [p.id for p in client.search(questions, 3)[0]] != expected:
                failures.append("different answer")

    def bad() -> None:
        for _ in range(20):
            if httpx.post(url, content=b"\xff\xfe", timeout=10).status_code != 400:
                failures.append("not a 400")

    threads = [threading.Thread(target=good) for _ in range(6)] + [threading.Thread(target=bad) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures


def test_it_reports_its_indexes_sizes_memory_and_latency(root: Path, service: str) -> None:
    RemoteRetriever(f"{service}/indexes/{_name(root)}/retrieve").search(["capital of Peru"], 3)
    report = httpx.get(f"{service}/indexes", timeout=10).json()
    assert report["rss_bytes"] > 10_000_000 and report["engine"] == "embedded"
    entry = next(e for e in report["indexes"] if e["name"] == _name(root))
    assert entry["open"] and entry["method"] == "bm25"
    assert entry["passages"] == len(builtin_dataset().corpus) and entry["size_bytes"] > 0
    assert entry["queries"] >= 1 and entry["query_p95_ms"] >= entry["query_p50_ms"] > 0


def test_a_client_whose_service_was_killed_fails_clearly_after_its_retries(root: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from inspo_engine.env.service import IndexShelf, make_service; "
        "s = make_service(IndexShelf(Path(sys.argv[1])), port=0); print(s.server_address[1], flush=True); "
        "s.serve_forever()"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())  # type: ignore[union-attr]
        client = RemoteRetriever(f"http://127.0.0.1:{port}/indexes/{_name(root)}/retrieve", retries=2, timeout_s=5)
        assert client.search(["capital of Peru"], 1)[0]
    finally:
        process.kill()
        process.wait()
    started = time.monotonic()
    with pytest.raises(RetrieverError, match=r"cannot reach the retriever at .* \(3 attempts\)"):
        client.search(["capital of Peru"], 1)
    assert time.monotonic() - started < 20  # 1 + 2 s of backoff, never a hang


def _children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_workers_share_the_port_report_together_and_one_that_dies_is_replaced(root: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from inspo_engine.env.service import IndexShelf, serve; "
        "serve(IndexShelf(Path(sys.argv[1])), '127.0.0.1', 0, workers=2)"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert "2 workers" in line, line
        address = line.split()[2].rstrip("/")
        url = f"{address}/indexes/{_name(root)}/retrieve"
        questions = [q.text for q in builtin_dataset().split("test")[:16]]
        expected = [[p.id for p in hits] for hits in CorpusIndex(root / _name(root)).search(questions, 3)]
        answers: list[list[str] | None] = [None] * len(questions)

        def ask(i: int) -> None:  # a connection each: the workers take them in turn
            answers[i] = [p.id for p in RemoteRetriever(url).search([questions[i]], 3)[0]]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert answers == expected
        workers = _children(process.pid)
        assert len(workers) == 2
        time.sleep(1.2)  # each worker publishes its counts at most once a second, on a search
        for question in questions:
            RemoteRetriever(url).search([question], 3)
        report = httpx.get(f"{address}/indexes", timeout=10).json()
        entry = next(e for e in report["indexes"] if e["name"] == _name(root))
        assert report["workers"] == 2 and report["rss_bytes"] > 10_000_000
        assert entry["open"] and entry["queries"] > len(questions)  # more than one worker's share

        killed = min(workers)
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (killed in _children(process.pid) or len(_children(process.pid)) < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert killed not in _children(process.pid) and len(_children(process.pid)) == 2
        assert [p.id for p in RemoteRetriever(url).search([questions[0]], 3)[0]] == expected[0]
        workers = _children(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)  # stopped with it


def test_workers_stop_when_their_service_is_killed(root: Path) -> None:
    """A service killed outright (SIGKILL: its workers get no signal from it) leaves no worker serving its port."""
    script = (
        "import sys; from pathlib import Path; from inspo_engine.env.service import IndexShelf, serve; "
        "serve(IndexShelf(Path(sys.argv[1])), '127.0.0.1', 0, workers=2)"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True)
    address = process.stdout.readline().split()[2].rstrip("/")  # type: ignore[union-attr]
    assert httpx.get(f"{address}/health", timeout=10).status_code == 200
    deadline = time.monotonic() + 10
    while len(_children(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = _children(process.pid)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{address}/health", timeout=5)
