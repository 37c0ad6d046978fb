"""The retrieval service: one process that opens each built corpus index once and answers every run's and evaluation's
searches over Search-R1's `POST /retrieve`, one path per index (`/indexes/<name>/retrieve`), with what it holds and how
fast it answers at `GET /indexes`; it builds no index and knows no job queue or web app.

Indexes are the folders `indexes.build_index` writes (embedded: tantivy and faiss over the passage store), or, with a
Milvus deployment, collections of the same names (`milvus.MilvusRetriever`). A request names an index by its folder
name only (`bm25-<32 hex>`), so nothing a client sends becomes a path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from inspo_engine.env.indexes import NAME, CorpusIndex, Encode, IndexMissing
from inspo_engine.env.retrievers import Scored, ScoredRetriever
from inspo_engine.env.server import MAX_BODY_BYTES, parse_retrieve_request, retrieve_response

MAX_TOPK = 100
MAX_QUERIES = 1_024
MAX_QUERY_CHARS = 4_096
LATENCIES_KEPT = 2_000
STATS_EVERY_S = 1.0
"""How often a worker of a multi-process service publishes its latencies for the others' `GET /indexes`."""
_RETRIEVE = re.compile(r"^/indexes/([^/]+)/retrieve$")


class ServiceError(Exception):
    """A request the service refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Served:
    """An opened index and the latencies of its last searches (ms per query, and per request)."""

    retriever: ScoredRetriever
    method: str
    passages: int
    size_bytes: int
    opened_s: float
    per_query_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))
    requests: int = 0
    queries: int = 0


def _percentile(values: deque[float], q: float) -> float | None:
    return round(float(np.percentile(np.fromiter(values, float), q)), 2) if values else None


def rss_bytes(pid: int | str = "self") -> int:
    """A process's resident memory, its pages shared with other processes counted by share (its proportional set
    size), so that the workers of one service sum to what they hold together; 0 for a process that is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


class IndexShelf:
    """The indexes under `root`, each opened on its first search and kept; dense ones share one query encoder (its
    calls serialised: a model is not safe to share between threads)."""

    def __init__(
        self,
        root: Path,
        *,
        encoder: Callable[[], Encode] | None = None,
        remote: Callable[[str], ScoredRetriever] | None = None,
    ) -> None:
        """`encoder` loads the dense query encoder when first needed; `remote(name)`, when given, serves every index
        from a distributed engine instead of `root` (a Milvus collection of that name)."""
        self.root = root
        self._encoder_loader = encoder
        self._encoder: Encode | None = None
        self._encode_lock = threading.Lock()
        self._remote = remote
        self._open: dict[str, _Served] = {}
        self._lock = threading.Lock()
        self._stats_dir: Path | None = None
        self._published = 0.0

    def share_stats(self, directory: Path) -> None:
        """Publish this process's latencies under `directory` (at most every STATS_EVERY_S) and report those the
        other workers published there: the workers of one service answer `GET /indexes` alike."""
        self._stats_dir = directory

    def _encode(self, texts: list[str]) -> Any:
        with self._encode_lock:
            if self._encoder is None:
                if self._encoder_loader is None:
                    raise ServiceError(503, "this service has no query encoder for dense indexes")
                self._encoder = self._encoder_loader()
            return self._encoder(texts)

    def get(self, name: str) -> _Served:
        if not NAME.fullmatch(name):
            raise ServiceError(404, f"no index named {name[:80]!r}: names look like bm25-<32 hex digits>")
        with self._lock:
            served = self._open.get(name)
            if served is None:
                served = self._open[name] = self._opened(name)
            return served

    def _opened(self, name: str) -> _Served:
        started = time.monotonic()
        method = name.split("-", 1)[0]
        if self._remote is not None:
            remote = self._remote(name)
            return _Served(remote, method, 0, 0, round(time.monotonic() - started, 3))
        folder = self.root / name
        if not (folder / "meta.json").is_file():
            raise ServiceError(404, f"no index {name} here yet: an index job builds it")
        try:
            index = CorpusIndex(folder, encode=self._encode if method == "dense" else None)
        except IndexMissing as error:
            raise ServiceError(404, str(error)) from error
        return _Served(index, method, len(index), index.size_bytes(), round(time.monotonic() - started, 3))

    def search(self, name: str, queries: list[str], k: int) -> Scored:
        served = self.get(name)
        started = time.perf_counter()
        scored = served.retriever.search_with_scores(queries, k)
        elapsed_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            served.requests += 1
            served.queries += len(queries)
            served.per_query_ms.extend([elapsed_ms / max(len(queries), 1)] * min(len(queries), 64))
            if self._stats_dir is not None and time.monotonic() - self._published >= STATS_EVERY_S:
                self._publish(self._stats_dir)
        return scored

    def _publish(self, directory: Path) -> None:
        """Write this worker's counts and latencies (under the lock) for its siblings' reports."""
        self._published = time.monotonic()
        stats = {
            name: {
                "passages": served.passages,
                "size_bytes": served.size_bytes,
                "open_s": served.opened_s,
                "requests": served.requests,
                "queries": served.queries,
                "per_query_ms": list(served.per_query_ms),
            }
            for name, served in self._open.items()
        }
        temporary = directory / f".{os.getpid()}.json"
        try:
            temporary.write_text(json.dumps(stats), encoding="utf-8")
            os.replace(temporary, directory / f"{os.getpid()}.json")
        except OSError:  # the service is stopping and its folder is gone
            pass

    def _siblings(self) -> dict[int, dict[str, Any]]:
        """What the other workers last published, by process id."""
        if self._stats_dir is None:
            return {}
        found = {}
        for path in self._stats_dir.glob("*.json"):
            pid = int(path.stem) if path.stem.isdigit() else 0
            if pid and pid != os.getpid():
                try:
                    found[pid] = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
        return found

    def report(self) -> dict[str, Any]:
        """What `GET /indexes` answers: memory, and per index its size and the latency of its last searches (over
        every worker of the service)."""
        built = sorted(p.name for p in self.root.glob("*") if NAME.fullmatch(p.name) and (p / "meta.json").is_file())
        siblings = self._siblings()
        with self._lock:
            mine = {
                name: {
                    "passages": served.passages,
                    "size_bytes": served.size_bytes,
                    "open_s": served.opened_s,
                    "requests": served.requests,
                    "queries": served.queries,
                    "per_query_ms": list(served.per_query_ms),
                }
                for name, served in self._open.items()
            }
        workers = [mine, *siblings.values()]
        names = sorted(set(built).union(*workers))
        indexes = []
        for name in names:
            held = [worker[name] for worker in workers if name in worker]
            entry: dict[str, Any] = {"name": name, "method": name.split("-", 1)[0], "open": bool(held)}
            if held:
                latencies: deque[float] = deque(value for stats in held for value in stats["per_query_ms"])
                entry |= {
                    "passages": held[0]["passages"],
                    "size_bytes": held[0]["size_bytes"],
                    "open_s": max(stats["open_s"] for stats in held),
                    "requests": sum(stats["requests"] for stats in held),
                    "queries": sum(stats["queries"] for stats in held),
                    "query_p50_ms": _percentile(latencies, 50),
                    "query_p95_ms": _percentile(latencies, 95),
                }
            indexes.append(entry)
        memory = rss_bytes() + sum(rss_bytes(pid) for pid in siblings)
        return {
            "rss_bytes": memory,
            "workers": 1 + len(siblings),
            "engine": "milvus" if self._remote else "embedded",
            "indexes": indexes,
        }


def parse_request(body: bytes) -> tuple[list[str], int, bool]:
    """A /retrieve body within the service's bounds (ServiceError 400 or 413 otherwise)."""
    try:
        queries, topk, return_scores = parse_retrieve_request(body)
    except ValueError as error:
        raise ServiceError(400, str(error)) from error
    if topk > MAX_TOPK:
        raise ServiceError(400, f"'topk' must be at most {MAX_TOPK}")
    if len(queries) > MAX_QUERIES:
        raise ServiceError(413, f"at most {MAX_QUERIES} queries a request; send them in batches")
    if any(len(q) > MAX_QUERY_CHARS or "\x00" in q for q in queries):
        raise ServiceError(400, f"a query must be text of at most {MAX_QUERY_CHARS} characters without NUL")
    return queries, topk, return_scores


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    shelf: IndexShelf
    disable_nagle_algorithm = True  # headers and body go out as two writes: without it, each answer waits ~40 ms

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200, {"status": "ok"})
        elif path == "/indexes":
            self._send(200, self.shelf.report())
        else:
            self._send(
                404, {"error": f"no such endpoint {path[:80]!r}; try GET /indexes or POST /indexes/<name>/retrieve"}
            )

    def do_POST(self) -> None:
        try:
            self._send(200, self._retrieve())
        except ServiceError as error:
            self._send(error.status, {"error": str(error)})
        except Exception as error:  # a failure of the service itself: answered, and the next request is served
            self._send(500, {"error": f"retrieval failed: {type(error).__name__}"})

    def _retrieve(self) -> dict[str, Any]:
        match = _RETRIEVE.match(self.path.split("?", 1)[0])
        if match is None:
            raise ServiceError(404, "searches go to POST /indexes/<name>/retrieve")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            raise ServiceError(400, "bad Content-Length")
        if length > MAX_BODY_BYTES:
            raise ServiceError(413, f"the body exceeds {MAX_BODY_BYTES} bytes")
        queries, topk, return_scores = parse_request(self.rfile.read(length))
        return retrieve_response(self.shelf.search(match.group(1), queries, topk), return_scores)


class _Server(ThreadingHTTPServer):
    """Threads per connection; its listening socket may be shared by the forked workers of one service."""

    daemon_threads = True

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        connection.setblocking(True)  # the shared listening socket is non-blocking; a connection is not
        return connection, address


def make_service(shelf: IndexShelf, host: str = "127.0.0.1", port: int = 8100) -> ThreadingHTTPServer:
    """A bound, not yet serving, HTTP server for the shelf's indexes (port 0 picks a free one)."""
    handler = type("RetrievalServiceHandler", (_Handler,), {"shelf": shelf})
    return _Server((host, port), handler)


def default_workers() -> int:
    """One worker process per core this process may run on, at most 4."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def serve(shelf: IndexShelf, host: str, port: int, *, workers: int = 1) -> None:
    """Serve until Ctrl-C or SIGTERM (both handled here: a process started in the background by a shell begins with
    SIGINT ignored). faiss searches one query per thread: the service's concurrency is its requests', and OpenMP's
    threads spinning beside them only slow every search down.

    With `workers` > 1 the bound socket is shared by that many forked processes, each with its own shelf: tantivy
    and faiss search without Python's lock, but HTTP and re-scoring hold it, one search at a time per process. Each
    worker opens an index on its first search there; the index files' pages are the operating system's, shared by
    all, while a dense index's codes are held once per worker. A worker that dies is started again."""
    import faiss

    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    faiss.omp_set_num_threads(1)
    server = make_service(shelf, host, port)
    bound_host, bound_port = server.server_address[:2]
    print(
        f"[retrieval] serving http://{bound_host!s}:{bound_port}/ (indexes under {shelf.root}, "
        f"{workers} worker{'s' if workers > 1 else ''})",
        flush=True,
    )
    if workers <= 1:
        _serve_here(server)
        return
    stats = Path(tempfile.mkdtemp(prefix="inspo-retrieval-"))
    server.socket.setblocking(False)  # every worker waits on it; the one that accepts first serves the connection
    stopping = threading.Event()
    children: set[int] = set()

    supervisor = os.getpid()

    def start_worker() -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                _stop_with_parent(supervisor)
                shelf.share_stats(stats)
                _serve_here(server)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        children.add(pid)

    def stop(signum: int, frame: Any) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    for _ in range(workers):
        start_worker()
    try:
        while not stopping.is_set():
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid in children:
                children.discard(pid)
                if not stopping.is_set():
                    print(f"[retrieval] worker {pid} stopped ({status}); starting another", flush=True)
                    start_worker()
            stopping.wait(0.2)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        server.server_close()
        shutil.rmtree(stats, ignore_errors=True)


def _stop_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM when its parent dies, even by SIGKILL: a worker never goes on
    serving the port of a service that is gone (Linux; elsewhere workers stop only with a signal the parent sends)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def _serve_here(server: ThreadingHTTPServer) -> None:
    """Serve in this process until SIGINT or SIGTERM."""

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()
