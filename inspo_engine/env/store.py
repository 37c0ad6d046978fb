"""A corpus on disk, read by row: its FlashRAG JSONL file and a file of where each record's line starts and ends, which
the OS pages in; it never holds the corpus, and knows no index or retriever."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inspo_engine.env.datasets import DatasetError, split_contents
from inspo_engine.env.protocol import Passage

OFFSETS = "offsets.u64"
"""Two uint64 per record, the start and end of its line in the JSONL file."""
_READ = 8 * 1024 * 1024


def corpus_digest(path: Path) -> str:
    """The sha256 of a corpus file, read in blocks; kept beside the file (`<name>.sha256`, with its size and mtime)
    so a 13 GB corpus is hashed once."""
    stat = path.stat()
    stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
    side = path.with_name(path.name + ".sha256")
    try:
        kept_stamp, kept = side.read_text(encoding="ascii").split()
        if kept_stamp == stamp and len(kept) == 64:
            return kept
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_READ):
            digest.update(block)
    value = digest.hexdigest()
    with contextlib.suppress(OSError):  # a read-only corpus folder: hash it again next time
        side.write_text(f"{stamp} {value}\n", encoding="ascii")
    return value


def record_passage(record: Any, where: str) -> Passage:
    """A passage from one FlashRAG corpus record, `{"id", "contents"}`."""
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    identifier, contents = record.get("id"), record.get("contents")
    if isinstance(identifier, bool) or not isinstance(identifier, int | str):
        raise DatasetError(f"{where}: 'id' must be a string or an integer")
    if not isinstance(contents, str):
        raise DatasetError(f"{where}: 'contents' must be a string")
    title, text = split_contents(contents)
    return Passage(str(identifier), title, text)


def scan_corpus(path: Path, *, skip_bytes: int = 0, first_line: int = 1) -> Iterator[tuple[int, int, Passage]]:
    """(start, end, passage) of every non-blank line from byte `skip_bytes` on (a line's start), one at a time;
    `first_line` is that line's number, for messages."""
    with path.open("rb") as handle:
        handle.seek(skip_bytes)
        start = skip_bytes
        for number, line in enumerate(handle, start=first_line):
            end = start + len(line)
            if line.strip():
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    raise DatasetError(f"{path.name}:{number}: invalid JSON ({error})") from error
                yield start, end, record_passage(record, f"{path.name}:{number}")
            start = end


class OffsetsWriter:
    """Appends (start, end) pairs to an offsets file; `truncate(rows)` cuts it back to a committed row count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = path.open("ab")
        self._pending: list[int] = []

    def add(self, start: int, end: int) -> None:
        self._pending += (start, end)
        if len(self._pending) >= 131_072:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._handle.write(np.asarray(self._pending, dtype="<u8").tobytes())
            self._pending = []
        self._handle.flush()

    def close(self) -> None:
        self.flush()
        self._handle.close()

    @staticmethod
    def truncate(path: Path, rows: int) -> int:
        """Keep the first `rows` pairs; returns the byte where the next record's line starts (0 for none)."""
        with path.open("r+b") as handle:
            handle.truncate(rows * 16)
            if rows == 0:
                return 0
            handle.seek((rows - 1) * 16 + 8)
            return int(np.frombuffer(handle.read(8), dtype="<u8")[0])


class PassageStore:
    """Passages by row, each read from the JSONL file when asked for (`os.pread`: safe to share between threads)."""

    def __init__(self, corpus: Path, offsets: Path) -> None:
        self.corpus = corpus
        size = offsets.stat().st_size
        self._offsets = (
            np.memmap(offsets, dtype="<u8", mode="r").reshape(-1, 2) if size else np.zeros((0, 2), dtype="<u8")
        )
        self._fd = os.open(corpus, os.O_RDONLY)

    def __len__(self) -> int:
        return int(self._offsets.shape[0])

    def passages(self, rows: Sequence[int]) -> list[Passage]:
        found = []
        for row in rows:
            start, end = (int(v) for v in self._offsets[row])
            line = os.pread(self._fd, end - start, start)
            found.append(record_passage(json.loads(line), f"{self.corpus.name}: row {row}"))
        return found

    def close(self) -> None:
        os.close(self._fd)
