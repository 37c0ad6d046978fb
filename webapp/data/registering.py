"""An operator's file of any size checked and written as canonical JSONL in bounded memory, and resumable: every few
seconds the partial canonical file is written out and a small state file beside it records how far the source was
read (bytes and lines), how much was written, each record's line and the lengths histogram. A run after an
interruption cuts the partial file to the state's size, reads it again for its sha256 and ids' digests (hashlib's
state cannot be saved), and reads the source on from there, so it ends with the file and sha256 of one uninterrupted
run. It knows files and the clock, not Django; JSONL only (a parquet is checked from its start each time).
"""

from __future__ import annotations

import io
import json
import shutil
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .formats import (
    GZIP_MAGIC,
    Checked,
    Kind,
    Limits,
    Resumed,
    UploadRefused,
    _Bounds,
    _Expansion,
    _jsonl_check,
    _Reader,
    _Writer,
    check_upload,
    source_format,
)
from .shapes import NO_MAPPING

STATE_VERSION = 1
"""The state file's schema; another is not read (the check starts again)."""


@dataclass(frozen=True)
class Report:
    """How far a check is: `done` of the file's `total` bytes (a .gz's compressed bytes), of which `resumed_from`
    were done before this run, in `seconds` of this run."""

    done: int
    total: int
    resumed_from: int
    seconds: float

    @property
    def rate(self) -> float:
        """Bytes a second in this run."""
        return (self.done - self.resumed_from) / max(self.seconds, 1e-9)

    def line(self) -> str:
        """'1,234 of 13,000 MB (9.5 %), 120.3 MB/s, ETA 1m38s'."""
        share = min(self.done / self.total, 1.0) if self.total else 1.0
        left = max(self.total - self.done, 0) / self.rate if self.rate > 0 else 0.0
        eta = f"{int(left // 60)}m{int(left % 60):02d}s"
        done, total = min(self.done, self.total) / 1e6, self.total / 1e6
        return f"{done:,.0f} of {total:,.0f} MB ({share:.1%}), {self.rate / 1e6:.1f} MB/s, ETA {eta}"


def check_file(
    path: Path,
    *,
    kind: Kind,
    limits: Limits,
    workdir: Path,
    progress: Callable[[Report], None] | None = None,
    every: float = 5.0,
) -> Checked:
    """Check `path` and write its canonical JSONL under `workdir`, going on from the state a run interrupted there
    left (when it was of the same file: name, size and modification time); a checkpoint and a `progress` report
    every `every` seconds. UploadRefused at the first bad record (the caller deletes `workdir`; any other exception
    leaves it for the next run)."""
    fmt = source_format(path.name)
    if not fmt.startswith("jsonl"):
        with path.open("rb") as handle:
            return check_upload(handle, filename=path.name, kind=kind, limits=limits, workdir=workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    source = _source(path, kind)
    state = _state_read(workdir, source)
    total = path.stat().st_size
    with path.open("rb") as handle:
        if fmt.endswith(".gz") and not handle.read(2).startswith(GZIP_MAGIC):
            raise UploadRefused(f"{path.name}: the name ends in .gz but the file is not gzip")
        handle.seek(0)
        stream: IO[bytes] = _Expansion(handle, path.name, limits) if fmt.endswith(".gz") else handle  # type: ignore[assignment]
        resumed = None
        if state is not None:
            resumed = Resumed(state["output"], array("Q", _lines_read(workdir, state["records"])), state["counts"])
            _skip(stream, state["offset"])
        output = workdir / "canonical.jsonl"
        try:
            writer = _Writer(output, kind, _Bounds(path.name, fmt, limits, total), resumed=resumed)
        except (ValueError, OSError):  # a state that does not match its file: from the start
            state, resumed = None, None
            handle.seek(0)
            stream = _Expansion(handle, path.name, limits) if fmt.endswith(".gz") else handle  # type: ignore[assignment]
            writer = _Writer(output, kind, _Bounds(path.name, fmt, limits, total))
        read = stream.counted if isinstance(stream, _Expansion) else handle
        checkpoints = _Checkpoints(workdir, source, writer, state, total, progress, every, read)
        reader = _Reader(kind, NO_MAPPING, path.name, rows=False)
        _jsonl_check(stream, path.name, limits, reader, writer, checkpoints)
        checked = writer.finish(path.name, fmt)
    checkpoints.report(total if fmt.endswith(".gz") else checkpoints.offset)
    checked.shape, checked.ids = reader.shape_name, reader.ids
    return checked


class _Checkpoints:
    """The `formats.Progress` of a resumable check: every `every` seconds, the canonical file written out, the new
    records' lines appended to lines.bin, then state.json replaced (so the state never runs ahead of the files),
    then a report."""

    def __init__(
        self,
        workdir: Path,
        source: dict[str, object],
        writer: _Writer,
        state: dict[str, Any] | None,
        total: int,
        progress: Callable[[Report], None] | None,
        every: float,
        read: io.IOBase | IO[bytes],
    ) -> None:
        self.workdir, self.source, self.writer, self.total = workdir, source, writer, total
        self.progress, self.every, self.read, self.plain = progress, every, read, read.seekable()
        self.offset = int(state["offset"]) if state else 0
        self.lines = int(state["lines"]) if state else 0
        self.resumed_from, self.saved = self.shown(self.offset), len(writer.lines)
        self.started = self.last = time.monotonic()
        if state is None:
            (workdir / "lines.bin").write_bytes(b"")

    def block(self, offset: int, lines: int) -> None:
        self.offset = offset
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        self.writer.checkpoint()
        with (self.workdir / "lines.bin").open("ab") as handle:
            handle.write(self.writer.lines[self.saved :].tobytes())
        self.saved = len(self.writer.lines)
        state = {
            "schema_version": STATE_VERSION,
            "source": self.source,
            "offset": offset,
            "lines": lines,
            "output": self.writer.size,
            "records": len(self.writer.lines),
            "counts": self.writer.counts,
        }
        temporary = self.workdir / "state.json.tmp"
        temporary.write_text(json.dumps(state))
        temporary.replace(self.workdir / "state.json")
        self.report(offset)

    def shown(self, offset: int) -> int:
        """The file's bytes read when `offset` bytes of its lines were: the same, or a .gz's compressed bytes."""
        return offset if self.plain else int(getattr(self.read, "read_bytes", offset))

    def report(self, offset: int) -> None:
        if self.progress is not None:
            seconds = time.monotonic() - self.started
            self.progress(Report(self.shown(offset), self.total, self.resumed_from, seconds))


def _source(path: Path, kind: Kind) -> dict[str, object]:
    stat = path.stat()
    return {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "kind": kind}


def _state_read(workdir: Path, source: dict[str, object]) -> dict[str, Any] | None:
    """The state an interrupted run of the same file left, or None (and the directory emptied) for any other."""
    try:
        state = json.loads((workdir / "state.json").read_text())
    except (OSError, ValueError):
        state = None
    if not isinstance(state, dict) or state.get("schema_version") != STATE_VERSION or state.get("source") != source:
        for child in workdir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        return None
    return state


def _lines_read(workdir: Path, records: int) -> bytes:
    """The first `records` lines of lines.bin (a later checkpoint may have appended more before it was cut short)."""
    with (workdir / "lines.bin").open("r+b") as handle:
        handle.truncate(records * 8)
        return handle.read()


def _skip(stream: IO[bytes], offset: int) -> None:
    """Read on past the first `offset` bytes (a seek for a plain file; a .gz is expanded again up to there)."""
    if stream.seekable():
        stream.seek(offset)
        return
    left = offset
    while left > 0:
        chunk = stream.read(min(left, 8 << 20))
        if not chunk:
            break
        left -= len(chunk)
