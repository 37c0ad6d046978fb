"""The check of plain JSONL records a block at a time, in C: a block of whole lines decoded at once by msgspec into
typed structs (FlashRAG's `{id, question, golden_answers}` or `{id, contents}`, no other keys) and encoded back as
the canonical lines. It vouches only for a block whose every record the per-record check of `formats` would keep as
it is, written byte for byte the same; for any other block it answers None, and `formats` reads that block a record
at a time, which names the first bad line and field. It knows blocks and records, not files, limits or messages.

Why each step is what it is:
- `forbid_unknown_fields`: a key the schema does not name would be skipped unchecked (its UTF-8, its nesting, its
  numbers, which msgspec reads more leniently than orjson), so a record with one is the per-record check's.
- `gc=False` structs and tuples: a block's tens of thousands of records would otherwise set off the cyclic garbage
  collector again and again (measured 3× slower).
- Integer ids only within a signed 64-bit range (msgspec bounds no wider): beyond 2**64 orjson reads a float, which
  the per-record check refuses, and the record-at-a-time check reads the rest.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from array import array
from bisect import bisect_left
from collections import Counter, deque
from concurrent.futures import CancelledError, Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool as BrokenExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

MAX_ID_CHARS = 200
NUL_ESCAPE = b"\\u0000"
"""How a NUL character appears in JSON (a raw one is not JSON); a block holding it is checked record by record."""

Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID_CHARS)] | Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Text = Annotated[str, Meta(min_length=1)]


class Question(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    id: Id
    question: Text
    golden_answers: Annotated[tuple[Text, ...], Meta(min_length=1)]


class Passage(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    id: Id
    contents: Text


@dataclass(frozen=True)
class Batch:
    """A block's records as canonical lines (`data`, each ending in a newline), the `hash()` of each one's id as
    int64s (the duplicate check's digests, the same in a forked helper), and the lengths histogram's counts (words
    of each question's first answer, or of each passage, in `bins`)."""

    data: bytes
    digests: bytes
    counts: list[int]

    @property
    def records(self) -> int:
        return len(self.digests) // 8


class FastLines:
    """Decodes and checks blocks of one kind's plain records; `most_line`: the longest canonical line allowed;
    `bins`: the upper edges (words) of the lengths histogram's bins."""

    def __init__(self, kind: Literal["questions", "corpus"], most_line: int, bins: tuple[int, ...]) -> None:
        self.kind, self.most_line, self.bins = kind, most_line, bins
        self.decoder = msgspec.json.Decoder(Question if kind == "questions" else Passage)
        self.encoder = msgspec.json.Encoder()

    def batch(self, block: bytes, lines: int) -> Batch | None:
        """The block (`lines` whole lines, each ending in a newline) as canonical lines, or None when any record in
        it needs the per-record check: a problem, a blank line (its number would shift), another key, a NUL."""
        if NUL_ESCAPE in block:
            return None
        try:
            records = self.decoder.decode_lines(block)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
        if len(records) != lines:
            return None
        ids = list(map(_ID, records))
        numbered = set(map(type, ids)) != {str}
        if numbered:
            ids = list(map(str, ids))
        if any(map(str.isspace, ids)):
            return None
        if self.kind == "corpus":
            texts = list(map(_CONTENTS, records))
            if any(map(str.isspace, texts)):
                return None
            if numbered:
                records = list(map(Passage, ids, texts))
        else:
            questions = list(map(_QUESTION, records))
            stripped = list(map(str.strip, questions))
            answers = list(map(_ANSWERS, records))
            if not all(stripped) or any(map(str.isspace, chain.from_iterable(answers))):
                return None
            if numbered or stripped != questions:
                records = list(map(Question, ids, stripped, answers))
            texts = list(map(itemgetter(0), answers))
        data = self.encoder.encode_lines(records)
        if numbered and max(map(len, data.split(b"\n"))) > self.most_line:  # "id": 1 became "id": "1"
            return None
        counts = [0] * (len(self.bins) + 1)
        for words, count in Counter(map(len, map(str.split, texts))).items():
            counts[bisect_left(self.bins, words)] += count
        return Batch(data, array("q", map(hash, ids)).tobytes(), counts)


_ID, _CONTENTS, _QUESTION, _ANSWERS = (attrgetter(name) for name in ("id", "contents", "question", "golden_answers"))


# -- a helper process --------------------------------------------------------------------------------------------

HELPER_DEPTH = 4
"""Blocks in flight: while the helper checks the even blocks, this process checks the odd ones and writes."""
_helper: Executor | None = None
_helper_lock = threading.Lock()
_checkers: dict[tuple[str, int, tuple[int, ...]], FastLines] = {}


class Blocks:
    """Checks a stream of blocks in order, half of them in a helper process (the other core), so a big upload is
    checked about twice as fast on two free cores: `add` a block, and while `ready()`, `next()` gives the oldest
    one with its batch (None as `FastLines.batch`); the helper stays `HELPER_DEPTH` blocks ahead."""

    def __init__(self, fast: FastLines, *, helper: bool) -> None:
        self.fast, self.helper = fast, _helper_pool() if helper else None
        self.pending: deque[tuple[bytes, int, Future[Batch | None] | None]] = deque()
        self.turn = 0

    def add(self, block: bytes, lines: int) -> None:
        future = None
        if self.helper is not None and self.turn % 2 == 0:
            key = (self.fast.kind, self.fast.most_line, self.fast.bins)
            try:
                future = self.helper.submit(_helper_batch, key, block, lines)
            except (BrokenExecutor, RuntimeError, OSError):  # it died: this process checks every block itself
                _helper_drop()
                self.helper = None
        self.turn += 1
        self.pending.append((block, lines, future))

    def ready(self) -> bool:
        return len(self.pending) > (HELPER_DEPTH if self.helper is not None else 0)

    def next(self) -> tuple[bytes, int, Batch | None]:
        """The oldest block, its lines and its batch."""
        block, lines, future = self.pending.popleft()
        if future is None:
            return block, lines, self.fast.batch(block, lines)
        try:
            return block, lines, future.result()
        except (BrokenExecutor, CancelledError, OSError):  # the helper died: this process checks the block itself
            _helper_drop()
            self.helper = None
            return block, lines, self.fast.batch(block, lines)

    def cancel(self) -> None:
        for _, _, future in self.pending:
            if future is not None:
                future.cancel()
        self.pending.clear()


def helper_submit(
    kind: Literal["questions", "corpus"], most_line: int, bins: tuple[int, ...], block: bytes, lines: int
) -> Future[Batch | None]:
    """One block sent to the helper process, checked as `FastLines(kind, most_line, bins).batch` checks it; OSError
    when there is no helper or it died."""
    pool = _helper_pool()
    if pool is None:
        raise OSError("no helper process")
    try:
        return pool.submit(_helper_batch, (kind, most_line, bins), block, lines)
    except (BrokenExecutor, RuntimeError) as error:
        _helper_drop()
        raise OSError("the helper process died") from error


def _helper_batch(key: tuple[str, int, tuple[int, ...]], block: bytes, lines: int) -> Batch | None:
    """In the helper: the block's batch."""
    fast = _checkers.get(key)
    if fast is None:
        fast = _checkers[key] = FastLines(key[0], key[1], key[2])  # type: ignore[arg-type]
    return fast.batch(block, lines)


def _helper_pool() -> Executor | None:
    """One helper process for this web process, started on first use and shared by its request threads; None when it
    cannot start. It is forked (a spawned one would import the web process's main module again); of what it copied
    it runs only this module's decoding, which takes no lock another thread of the web process could have held at
    the fork (no logging, no imports)."""
    global _helper
    with _helper_lock:
        if _helper is None:
            try:
                _helper = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("fork"),
                    initializer=_helper_watch,
                    initargs=(os.getpid(),),
                )
            except (OSError, ValueError):
                return None
        return _helper


def _helper_watch(parent: int) -> None:
    """In the helper: exit within a second of the process that started it (a killed web worker or command leaves no
    helper behind: the helper holds its own copy of the pipe, so it would never see it close)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="helper-watch", daemon=True).start()


def _helper_drop() -> None:
    """Forget a helper that died (the next upload starts another); another request's blocks in it fail over too."""
    global _helper
    with _helper_lock:
        if _helper is not None:
            _helper.shutdown(wait=False)
        _helper = None
