"""A Search-R1-compatible `POST /retrieve` HTTP server over any Retriever; it knows no index or model itself."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from inspo_engine.env.datasets import join_contents
from inspo_engine.env.protocol import Retriever
from inspo_engine.env.retrievers import Scored, ScoredRetriever

DEFAULT_TOPK = 3
MAX_BODY_BYTES = 8 * 1024 * 1024
_ROUTES = {"/retrieve": "POST", "/health": "GET"}


class _BadRequest(ValueError):
    """The request body does not follow the /retrieve format."""


def parse_retrieve_request(body: bytes, default_topk: int = DEFAULT_TOPK) -> tuple[list[str], int, bool]:
    """(queries, topk, return_scores) from a /retrieve body; `topk` may be left out or null, as in Search-R1.

    >>> parse_retrieve_request(b'{"queries": ["capital of Peru"], "topk": 2}')
    (['capital of Peru'], 2, False)
    """
    try:
        request = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _BadRequest(f"the body is not valid JSON: {error}") from error
    if not isinstance(request, dict):
        raise _BadRequest('the body must be a JSON object like {"queries": ["..."], "topk": 3}')
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise _BadRequest("'queries' must be a list of strings")
    topk = request.get("topk")
    topk = default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise _BadRequest("'topk' must be a positive integer")
    return_scores = request.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise _BadRequest("'return_scores' must be true or false")
    return queries, topk, return_scores


def _retrieve(retriever: Retriever, queries: Sequence[str], k: int) -> Scored:
    """Passages with scores; a retriever that gives none is scored by reciprocal rank (1, 1/2, 1/3, …)."""
    if isinstance(retriever, ScoredRetriever):
        return retriever.search_with_scores(queries, k)
    return [[(p, 1.0 / rank) for rank, p in enumerate(hits, start=1)] for hits in retriever.search(queries, k)]


def retrieve_response(scored: Scored, return_scores: bool) -> dict[str, Any]:
    """The /retrieve answer: per query, `{"document": {"id", "contents"}, "score"}` items or bare documents."""
    result: list[list[dict[str, Any]]] = []
    for hits in scored:
        documents = [({"id": p.id, "contents": join_contents(p)}, score) for p, score in hits]
        if return_scores:
            result.append([{"document": document, "score": score} for document, score in documents])
        else:
            result.append([document for document, _ in documents])
    return {"result": result}


class _Handler(BaseHTTPRequestHandler):
    """Routes GET /health and POST /retrieve; every answer is JSON."""

    protocol_version = "HTTP/1.1"
    retriever: Retriever
    disable_nagle_algorithm = True  # headers and body go out as two writes: without it, each answer waits ~40 ms
    lock: threading.Lock
    default_topk: int

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise in training logs
        return

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str) -> bool:
        """True when this method may go on; otherwise the 404/405 answer has been sent."""
        path = urlsplit(self.path).path
        if path not in _ROUTES:
            self.close_connection = True
            self._send(404, {"error": f"no such endpoint {path!r}; try POST /retrieve or GET /health"})
            return False
        if _ROUTES[path] != method:
            self.close_connection = True
            self._send(405, {"error": f"{path} takes {_ROUTES[path]}"}, {"Allow": _ROUTES[path]})
            return False
        return True

    def do_GET(self) -> None:
        if self._route("GET"):
            self._send(200, {"status": "ok"})

    def _body(self) -> bytes | None:
        """The request body, or None when its length is unusable (the error answer has been sent)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if 0 <= length <= MAX_BODY_BYTES:
            return self.rfile.read(length)
        self.close_connection = True
        if length < 0:
            self._send(400, {"error": "bad Content-Length"})
        else:
            self._send(413, {"error": f"the body exceeds {MAX_BODY_BYTES} bytes"})
        return None

    def do_POST(self) -> None:
        body = self._body() if self._route("POST") else None
        if body is None:
            return
        try:
            queries, topk, return_scores = parse_retrieve_request(body, self.default_topk)
        except _BadRequest as error:
            self._send(400, {"error": str(error)})
            return
        try:
            with self.lock:  # tokenizers and models are not safe to share between threads
                scored = _retrieve(self.retriever, queries, topk)
        except Exception as error:  # the server must answer, whatever the retriever raised
            self._send(500, {"error": f"retrieval failed: {type(error).__name__}: {error}"})
            return
        self._send(200, retrieve_response(scored, return_scores))

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")


def make_retrieval_server(
    retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, default_topk: int = DEFAULT_TOPK
) -> ThreadingHTTPServer:
    """A bound, not yet serving, HTTP server for `retriever` (port 0 picks a free port: see `server_address`)."""
    handler = type(
        "RetrievalHandler",
        (_Handler,),
        {"retriever": retriever, "lock": threading.Lock(), "default_topk": default_topk},
    )
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_forever(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until Ctrl-C, printing the URL to point `env.retriever_url` at."""
    server = make_retrieval_server(retriever, host, port)
    bound_host, bound_port = server.server_address[:2]
    print(f"Serving POST http://{bound_host!s}:{bound_port}/retrieve (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("Stopped.", flush=True)
    finally:
        server.server_close()
