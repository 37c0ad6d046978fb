"""The formats a team uploads, checked while they stream and rewritten as the one the engine reads: FlashRAG JSONL
(`{id, question, golden_answers}` questions, `{id, contents}` corpora), Search-R1's parquet (`question` and
`golden_answers` columns, or `prompt` with `reward_model.ground_truth.target`), and either gzipped. It knows files
and limits, not Django, teams or storage.

Memory stays bounded whatever the file's size: lines are read a block at a time (at most `max_line_bytes` each),
parquet a batch of rows at a time, and the duplicate-id check keeps 16 bytes per record (a digest and a line). The
first bad record stops the check with an `UploadRefused` naming the file, the line or row, and the field. Plain
FlashRAG JSONL is checked a block at a time in C (`fastpath`); a block with anything else in it, a problem included,
is checked here a record at a time, so the messages are the same either way.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import io
import os
import shutil
import tempfile
from array import array
from collections import deque
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import msgspec
import orjson

from webapp.core.text import json_depth

from .fastpath import MAX_ID_CHARS, Batch, Blocks, FastLines, helper_submit
from .shapes import FLASHRAG, NO_MAPPING, FieldMap, Shape, ShapeUnknown, detect, ids_from, read

Kind = Literal["questions", "corpus"]
KINDS: tuple[Kind, ...] = ("questions", "corpus")
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".parquet.gz")
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
PARQUET_BATCH_ROWS = 1024
LINE_BLOCK = 1 << 19
"""Bytes read at a time from a JSONL upload (less than a line may hold, so that most blocks need no line measured)."""
NUL = "\x00"
NUL_PROBLEM = "holds a NUL character (\\u0000), which no text field may"
ANSWER_BINS = (1, 2, 3, 4, 5, 10, 20)
"""Upper edges (words) of the answer-length histogram's bins; a last bin holds the longer ones."""
PASSAGE_BINS = (25, 50, 100, 200, 400, 800)
"""The same for a corpus's passages."""


class UploadRefused(ValueError):
    """A file the platform will not keep; `status` is the HTTP status (400, or 413 for size)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class OverBudget(UploadRefused):
    """The canonical file grew past `Limits.max_output_bytes` (the caller's budget, such as a team's data left)."""


@dataclass(frozen=True)
class Limits:
    """The operator's bounds on one upload."""

    max_bytes: int = 1 << 30
    """The uploaded file's size (compressed, for a .gz)."""
    max_expanded_bytes: int = 4 << 30
    """What a .gz may expand to."""
    max_ratio: int = 100
    """How many times its compressed size a .gz may expand to (text compresses 3–10×; a bomb 1000×)."""
    max_line_bytes: int = 1 << 20
    """One JSONL line (a passage is a few kB)."""
    max_depth: int = 8
    """How deeply a record's JSON may nest."""
    max_output_bytes: int = 1 << 62
    """What the canonical file may hold: the caller's budget (a team's data left), checked while it is written."""


class Progress(Protocol):
    """Hears a JSONL check's advance after each block of lines; a resumed check starts after `lines` lines and
    `offset` bytes of its stream."""

    lines: int
    offset: int

    def block(self, offset: int, lines: int) -> None: ...


@dataclass
class Checked:
    """What a valid upload holds: the canonical JSONL written to `path`, its sha256 and size, counts and lengths."""

    path: Path
    sha256: str
    size: int
    records: int
    source_format: str
    lengths: dict[str, int] = field(default_factory=dict)
    """Histogram: bin label → records (answer words for questions, passage words for a corpus)."""
    shape: str = "flashrag"
    """The records' shape as detected (`shapes`): flashrag, verl, nq_open, triviaqa, or with `+mapping`."""
    ids: str = "id"
    """Where the ids came from: a field's dotted path, or 'line number' (a parquet's row number)."""


def source_format(filename: str) -> str:
    """The upload's format by its name: one of SUFFIXES without the dot; UploadRefused for any other."""
    name = filename.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix[1:]
    raise UploadRefused(f"{filename}: the file's name must end in {', '.join(SUFFIXES)}")


def check_upload(
    source: IO[bytes], *, filename: str, kind: Kind, limits: Limits, workdir: Path, mapping: FieldMap = NO_MAPPING
) -> Checked:
    """Read `source` once, check every record and write the canonical JSONL under `workdir`; UploadRefused at the
    first problem (the caller deletes `workdir`: nothing partial is kept). A questions file's shape is detected
    from its first record, with `mapping` (a team's own field names) over it."""
    fmt = source_format(filename)
    head = source.read(4)
    size = source.seek(0, io.SEEK_END)
    source.seek(0)
    if fmt.endswith(".gz") and not head.startswith(GZIP_MAGIC):
        raise UploadRefused(f"{filename}: the name ends in .gz but the file is not gzip")
    if mapping and kind == "corpus":
        raise UploadRefused("question_field, answers_field and id_field name a questions file's fields")
    bounds = _Bounds(filename, fmt, limits, size)
    reader = _Reader(kind, mapping, filename, rows=fmt.startswith("parquet"))
    early: EarlyCheck | None = getattr(source, "early", None)
    adopted = early.adopt(kind, mapping, bounds) if early is not None else None
    if adopted is not None:  # the lines checked while the body arrived; the check goes on after them
        writer, resumed = adopted
        reader.shape = FLASHRAG if kind == "questions" else None
        source.seek(resumed.offset)
        _jsonl_check(source, filename, limits, reader, writer, resumed)
        checked = writer.finish(filename, fmt)
        checked.shape, checked.ids = reader.shape_name, reader.ids
        return checked
    writer = _Writer(workdir / "canonical.jsonl", kind, bounds)
    if fmt.startswith("jsonl"):
        stream: IO[bytes] = _Expansion(source, filename, limits) if fmt.endswith(".gz") else source  # type: ignore[assignment]
        _jsonl_check(stream, filename, limits, reader, writer)
    else:
        path = _parquet_file(source, filename, limits, workdir) if fmt.endswith(".gz") else _seekable(source, workdir)
        for number, record in _parquet_records(path, filename, kind, mapping):
            writer.add(reader.canonical(record, number, f"row {number}"), number)
    checked = writer.finish(filename, fmt)
    checked.shape, checked.ids = reader.shape_name, reader.ids
    return checked


class _Reader:
    """Reads each record in the shape of the file's first (a corpus: FlashRAG's) as FlashRAG's fields, then checks
    it; a first record of no known shape is an UploadRefused naming its keys and the mapping fields."""

    def __init__(self, kind: Kind, mapping: FieldMap, filename: str, *, rows: bool) -> None:
        self.kind, self.mapping, self.filename, self.rows = kind, mapping, filename, rows
        self.shape: Shape | None = None
        self.shape_name, self.ids = "flashrag", "id"

    @property
    def plain(self) -> bool:
        """Whether the records are FlashRAG's as they are (a corpus, or questions of that shape with no mapping)."""
        return self.kind == "corpus" or self.shape == FLASHRAG

    def canonical(self, record: Any, number: int, where: str) -> dict[str, Any]:
        if self.kind == "corpus":
            return _canonical(record, self.kind, self.filename, where)
        if self.shape is None:
            try:
                self.shape = detect(record, mapping=self.mapping, rows=self.rows)
            except ShapeUnknown as unknown:
                raise UploadRefused(f"{self.filename}: {where}: {unknown}") from None
            self.shape_name, self.ids = self.shape.name, ids_from(self.shape, record)
        flat, names = read(record, self.shape, number)
        return _canonical(flat, self.kind, self.filename, where, names)


# -- JSONL -------------------------------------------------------------------------------------------------------


class _Expansion(io.RawIOBase):
    """A gzip stream that refuses to expand past the limits (its size, and its ratio to what was read)."""

    def __init__(self, source: IO[bytes], filename: str, limits: Limits) -> None:
        self.counted = _Counted(source)
        self.inner = gzip.GzipFile(fileobj=self.counted, mode="rb")
        self.filename, self.limits, self.expanded = filename, limits, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            count = self.inner.readinto(buffer)
        except (OSError, EOFError, gzip.BadGzipFile) as error:
            raise UploadRefused(f"{self.filename}: not a valid gzip stream ({error})") from None
        self.expanded += count
        if self.expanded > self.limits.max_expanded_bytes:
            raise UploadRefused(f"{self.filename}: expands past {self.limits.max_expanded_bytes:,} bytes", status=413)
        if self.expanded > self.limits.max_ratio * max(self.counted.read_bytes, 1 << 16):
            raise UploadRefused(
                f"{self.filename}: expands more than {self.limits.max_ratio}× its compressed size "
                "(a compression bomb is refused)"
            )
        return count


class _Counted(io.RawIOBase):
    """Counts the bytes read from `source`."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source, self.read_bytes = source, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(len(buffer))
        buffer[: len(data)] = data
        self.read_bytes += len(data)
        return len(data)


HELPER_FROM_BYTES = 32 << 20
"""Uploads at least this big are checked with a helper process beside this one (`fastpath.Blocks`)."""


def _jsonl_check(
    stream: IO[bytes], filename: str, limits: Limits, reader: _Reader, writer: _Writer, progress: Progress | None = None
) -> None:
    """Check every line and write it: a block of lines at a time through `fastpath` once the first record showed
    plain FlashRAG records, and a block it does not vouch for (or any block before) a record at a time, which
    names the first bad line and field. `progress` hears the bytes read and the lines done after each block."""
    checker: Blocks | None = None
    done, read = (progress.lines, progress.offset) if progress else (0, 0)
    try:
        for block, lines in _blocks(stream, filename, limits.max_line_bytes, done):
            if checker is None:
                _slow_block(block, done, filename, limits, reader, writer)
                if reader.plain:
                    fast = FastLines(reader.kind, limits.max_line_bytes, writer.bins)
                    checker = Blocks(fast, helper=writer.bounds.upload_bytes >= HELPER_FROM_BYTES)
                done, read = done + lines, read + len(block)
                if progress is not None:
                    progress.block(read, done)
                continue
            checker.add(block, lines)
            while checker.ready():
                done, read = _fast_block(checker, done, read, filename, limits, reader, writer, progress)
        while checker is not None and checker.pending:
            done, read = _fast_block(checker, done, read, filename, limits, reader, writer, progress)
    finally:
        if checker is not None:
            checker.cancel()


@dataclass
class _Resumed:
    """A check that goes on after `lines` lines and `offset` bytes already checked and written (a `Progress`)."""

    lines: int
    offset: int

    def block(self, offset: int, lines: int) -> None:
        pass


class EarlyCheck:
    """Checks a plain JSONL upload while its body is still arriving: as the upload handler writes the file, each new
    half megabyte of whole lines goes to the helper process (`fastpath`), and the canonical lines it vouches for are
    written here, so that the check after the body has only the rest to do (`check_upload` adopts the lines done).
    The kind is guessed from the first line; at the first block the helper does not vouch for (a problem, another
    shape, a blank line, a long line), it stops, and the check after the body reads on from the last block it
    vouched for, a record at a time, naming the line as ever. What it holds: at most `DEPTH` blocks in flight, and
    the canonical file being written in its own folder (deleted by `close`, once the request ends)."""

    DEPTH = 8

    def __init__(self, path: Path, most_line: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.most_line = most_line
        self.folder = Path(tempfile.mkdtemp(prefix="inspo-early-", dir=path.parent))
        self.kind: Kind | None = None
        self.writer: _Writer | None = None
        self.pending: deque[tuple[int, int, Future[Batch | None]]] = deque()
        self.sent = self.offset = self.lines = 0
        self.stopped = self.failed = False

    def feed(self, received: int, *, last: bool = False) -> None:
        """The file holds `received` bytes now (`last`: all of it): write the blocks checked, send the next ones."""
        self._write(wait=False)
        while not self.stopped and len(self.pending) < self.DEPTH and (received - self.sent >= LINE_BLOCK or last):
            data = os.pread(self.fd, LINE_BLOCK, self.sent)
            end = data.rfind(b"\n") + 1
            if end == 0:  # a line longer than a block, or the end of a file with no last newline
                self.stopped = True
                break
            block = data[:end]
            writer = self.writer or self._start(block)
            try:
                future = helper_submit(writer.kind, self.most_line, writer.bins, block, block.count(b"\n"))
            except OSError:  # no helper: the check after the body does it all
                self.stopped = True
                break
            self.sent += end
            self.pending.append((self.sent, block.count(b"\n"), future))

    def _start(self, block: bytes) -> _Writer:
        """The writer, for the kind the first line shows (its bounds are set when the check adopts it)."""
        self.kind = "corpus" if b'"contents"' in block[: block.find(b"\n")] else "questions"
        bounds = _Bounds("upload", "jsonl", Limits(max_line_bytes=self.most_line), 1 << 40)
        self.writer = _Writer(self.folder / "canonical.jsonl", self.kind, bounds)
        return self.writer

    def _write(self, *, wait: bool) -> None:
        """Write the blocks the helper has checked, in order (all of those in flight when `wait`)."""
        while self.pending and (wait or self.pending[0][2].done()):
            end, lines, future = self.pending.popleft()
            try:
                batch = None if self.failed else future.result()
            except (BrokenProcessPool, CancelledError, OSError):
                batch = None
            if batch is None or self.writer is None or not self.writer.add_batch(batch, self.lines + 1):
                self.stopped = self.failed = True  # the lines done so far stand; the check after the body goes on
                continue
            self.offset, self.lines = end, self.lines + lines

    def adopt(self, kind: Kind, mapping: FieldMap, bounds: _Bounds) -> tuple[_Writer, _Resumed] | None:
        """The writer and where the check goes on, when what was checked is what this upload's check would have
        done (plain JSONL of this kind, no mapping, the same line limit, within `bounds`); None otherwise."""
        self.stopped = True  # nothing more is sent
        self._write(wait=True)
        writer = self.writer
        same = (
            kind == self.kind
            and not mapping
            and bounds.fmt == "jsonl"
            and bounds.limits.max_line_bytes == self.most_line
        )
        if writer is None or not same or not self.lines or writer.written > bounds.most:
            return None
        writer.bounds, writer.most = bounds, bounds.most
        self.writer = None  # the caller's now
        return writer, _Resumed(self.lines, self.offset)

    def close(self) -> None:
        for _, _, future in self.pending:
            future.cancel()
        self.pending.clear()
        if self.writer is not None:
            self.writer.handle.close()
        os.close(self.fd)
        shutil.rmtree(self.folder, ignore_errors=True)


def _fast_block(
    checker: Blocks,
    done: int,
    read: int,
    filename: str,
    limits: Limits,
    reader: _Reader,
    writer: _Writer,
    progress: Progress | None,
) -> tuple[int, int]:
    """Write the oldest block in flight, a record at a time when its batch is None; the lines and bytes done."""
    block, lines, batch = checker.next()
    if batch is None or not writer.add_batch(batch, done + 1):
        _slow_block(block, done, filename, limits, reader, writer)
    done, read = done + lines, read + len(block)
    if progress is not None:
        progress.block(read, done)
    return done, read


def _slow_block(block: bytes, done: int, filename: str, limits: Limits, reader: _Reader, writer: _Writer) -> None:
    for number, record in _block_records(block, done, filename, limits):
        writer.add(reader.canonical(record, number, f"line {number}"), number)


def _block_records(block: bytes, before: int, filename: str, limits: Limits) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a block that follows line `before`; UploadRefused for
    a non-UTF-8 or bad line."""
    for number, line in enumerate(block.split(b"\n")[:-1], start=before + 1):
        if not line or line.isspace():
            continue
        try:
            value = orjson.loads(line)  # checks UTF-8 too
        except orjson.JSONDecodeError as error:
            raise _bad_line(line, error, f"{filename}: line {number}") from None
        if line.count(b"[") + line.count(b"{") > limits.max_depth and json_depth(value) > limits.max_depth:
            raise UploadRefused(f"{filename}: line {number}: JSON nested more than {limits.max_depth} levels deep")
        yield number, value


def _blocks(stream: IO[bytes], filename: str, most: int, before: int = 0) -> Iterator[tuple[bytes, int]]:
    """The stream's lines in blocks of whole lines (each ending in a newline; the last gets one) with their count,
    read `LINE_BLOCK` bytes at a time; UploadRefused for a line longer than `most` bytes, found before more than one
    block past it is held. `before`: the lines before the stream's start (a resumed check's)."""
    import numpy as np

    rest, number = b"", before
    while True:
        block = stream.read(LINE_BLOCK)
        if not block:
            break
        data = rest + block
        end = data.rfind(b"\n") + 1
        rest = data[end:]
        if len(data) <= most:  # no line in it can be longer
            count = data.count(b"\n", 0, end)
        else:
            ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
            lengths = np.diff(ends, prepend=-1) - 1
            if len(rest) > most or (len(ends) and int(lengths.max()) > most):
                long = int(np.argmax(lengths > most)) if len(ends) and int(lengths.max()) > most else len(ends)
                raise UploadRefused(f"{filename}: line {number + long + 1} is longer than {most:,} bytes")
            count = len(ends)
        number += count
        if end:
            yield data[:end], count
    if rest:
        yield rest + b"\n", 1


def _bad_line(line: bytes, error: orjson.JSONDecodeError, where: str) -> UploadRefused:
    """Why a line is not JSON, in words: bad UTF-8 (with its byte), nesting past orjson's limit, or the parser's."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return UploadRefused(f"{where}: not valid UTF-8 (at byte {bad.start})")
    if "depth limit" in error.msg or "recursion" in error.msg:
        return UploadRefused(f"{where}: JSON nested too deeply")
    return UploadRefused(f"{where}: invalid JSON ({error.msg} at column {error.colno})")


# -- parquet -----------------------------------------------------------------------------------------------------


def _seekable(source: IO[bytes], workdir: Path) -> Path:
    """A path to the upload (a temporary upload has one; anything else is copied)."""
    name = getattr(source, "temporary_file_path", None)
    if callable(name):
        return Path(name())
    target = workdir / "source.parquet"
    with target.open("wb") as handle:
        shutil.copyfileobj(source, handle, 1 << 20)
    return target


def _parquet_file(source: IO[bytes], filename: str, limits: Limits, workdir: Path) -> Path:
    """A gzipped parquet expanded (within the limits) into `workdir`."""
    target = workdir / "source.parquet"
    with target.open("wb") as handle:
        shutil.copyfileobj(_Expansion(source, filename, limits), handle, 1 << 20)
    return target


def _parquet_records(
    path: Path, filename: str, kind: Kind, mapping: FieldMap = NO_MAPPING
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, row) of every row, a batch at a time, with the columns its shape reads."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise UploadRefused(f"{filename}: not a parquet file ({type(error).__name__})") from None
    columns = _parquet_columns(set(parquet.schema_arrow.names), filename, kind, mapping)
    number = 0
    batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
    while True:
        try:
            batch = next(batches, None)
            rows = [] if batch is None else batch.to_pylist()
        except (pa.ArrowException, OSError) as error:  # a damaged page (snappy, thrift) is an OSError
            raise UploadRefused(f"{filename}: row {number + 1}: unreadable, damaged ({type(error).__name__})") from None
        except UnicodeDecodeError:
            raise UploadRefused(f"{filename}: {_not_utf8(batch, number)}: not valid UTF-8") from None
        if batch is None:
            return
        for row in rows:
            number += 1
            yield number, row


def _not_utf8(batch: Any, before: int) -> str:
    """Where a batch's text is not UTF-8: 'row N: field 'name'' (read a cell at a time, once a batch failed)."""
    for index in range(batch.num_rows):
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            try:
                column.slice(index, 1).to_pylist()
            except UnicodeDecodeError:
                return f"row {before + index + 1}: field '{name}'"
    return f"row {before + 1}"


def _parquet_columns(names: set[str], filename: str, kind: Kind, mapping: FieldMap) -> list[str]:
    """The columns a corpus (id, contents) or the questions' shape reads; UploadRefused naming the ones it has."""
    if kind == "corpus":
        missing = [name for name in ("id", "contents") if name not in names]
        if missing:
            raise UploadRefused(f"{filename}: missing column {', '.join(missing)} (it has {', '.join(sorted(names))})")
        return ["id", "contents"]
    try:
        shape = detect(None, keys=names, mapping=mapping, rows=True)
    except ShapeUnknown as unknown:
        raise UploadRefused(f"{filename}: {unknown}") from None
    paths = (*shape.question, *shape.answers, *shape.ids, "answer")
    return sorted({path.split(".")[0] for path in paths} & names)


# -- records -----------------------------------------------------------------------------------------------------


def _canonical(
    record: Any, kind: Kind, filename: str, where: str, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """The record as the engine reads it; UploadRefused naming the field that is wrong. The common case (string
    id, fields of the right types) is checked in one expression; anything else goes through `_checked_record`."""
    if type(record) is dict:
        identifier = record.get("id")
        if (
            type(identifier) is str
            and 0 < len(identifier) <= MAX_ID_CHARS
            and not identifier.isspace()
            and NUL not in identifier
        ):
            if kind == "questions":
                question, answers = record.get("question"), record.get("golden_answers")
                if (
                    type(question) is str
                    and question.strip()
                    and NUL not in question
                    and type(answers) is list
                    and answers
                    and all(type(a) is str and a and not a.isspace() and NUL not in a for a in answers)
                ):
                    return {"id": identifier, "question": question.strip(), "golden_answers": answers}
            else:
                contents = record.get("contents")
                if type(contents) is str and contents.strip() and NUL not in contents:
                    return {"id": identifier, "contents": contents}
    return _checked_record(record, kind, filename, where, names or {})


def _checked_record(record: Any, kind: Kind, filename: str, where: str, names: dict[str, str]) -> dict[str, Any]:
    """The slow path's checks, each naming the field as the file names it (`names`: a shape's source paths)."""

    def refuse(name: str, problem: str) -> UploadRefused:
        return UploadRefused(f"{filename}: {where}: field '{names.get(name, name)}' {problem}")

    if not isinstance(record, dict):
        raise UploadRefused(f"{filename}: {where}: expected a JSON object, got {type(record).__name__}")
    identifier = record.get("id")
    if identifier is None:
        raise refuse("id", "is missing")
    if isinstance(identifier, bool) or not isinstance(identifier, int | str) or not str(identifier).strip():
        raise refuse("id", "must be a non-empty string or an integer")
    if len(str(identifier)) > MAX_ID_CHARS:
        raise refuse("id", f"must be at most {MAX_ID_CHARS} characters")
    if NUL in str(identifier):
        raise refuse("id", NUL_PROBLEM)
    if kind == "corpus":
        contents = record.get("contents")
        if not isinstance(contents, str) or not contents.strip():
            raise refuse("contents", "must be a non-empty string")
        if NUL in contents:
            raise refuse("contents", NUL_PROBLEM)
        return {"id": str(identifier), "contents": contents}
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise refuse("question", "must be a non-empty string")
    if NUL in question:
        raise refuse("question", NUL_PROBLEM)
    answers = record.get("golden_answers")
    answers = [answers] if isinstance(answers, str) else answers
    if not isinstance(answers, list) or not answers:
        raise refuse("golden_answers", "must be a non-empty list of strings")
    if not all(isinstance(a, str) and a.strip() for a in answers):
        raise refuse("golden_answers", "must hold non-empty strings only")
    if any(NUL in a for a in answers):
        raise refuse("golden_answers", NUL_PROBLEM)
    return {"id": str(identifier), "question": question.strip(), "golden_answers": answers}


@dataclass(frozen=True)
class _Bounds:
    """What the canonical file may grow to, whatever the format: a record at most a JSONL line's bytes, and the
    whole at most `max_ratio` times the uploaded file (a parquet expands like a gzip), `max_expanded_bytes` and
    `max_output_bytes`."""

    filename: str
    fmt: str
    limits: Limits
    upload_bytes: int

    @property
    def most(self) -> int:
        ratio = self.limits.max_ratio * max(self.upload_bytes, 1 << 16)
        return min(ratio, self.limits.max_expanded_bytes, self.limits.max_output_bytes)

    def refusal(self, size: int, line: int) -> UploadRefused:
        """Why `size` bytes written (by the record of `line`) is too many."""
        limits, name = self.limits, self.filename
        if size > limits.max_output_bytes:
            return OverBudget(f"{name}: its records come to more than {limits.max_output_bytes:,} bytes")
        if size > limits.max_expanded_bytes:
            return UploadRefused(f"{name}: expands past {limits.max_expanded_bytes:,} bytes", status=413)
        return UploadRefused(
            f"{name}: {self.unit} {line}: the records expand more than {limits.max_ratio}× the file's size "
            "(a compression bomb is refused)"
        )

    @property
    def unit(self) -> str:
        return "row" if self.fmt.startswith("parquet") else "line"


class _Id(msgspec.Struct, gc=False):
    id: str


@dataclass(frozen=True)
class Resumed:
    """Where an interrupted check of a file stopped: the canonical file's first `size` bytes hold its records, whose
    lines are `lines`, and the lengths histogram so far."""

    size: int
    lines: array[int]
    counts: list[int]


class _Writer:
    """Writes canonical records (compact JSON, a batch at a time), hashing them as they go, within its bounds; keeps
    an 8-byte hash of each id (and its line) to find duplicates at the end; counts lengths."""

    BATCH = 4096

    def __init__(self, path: Path, kind: Kind, bounds: _Bounds, *, resumed: Resumed | None = None) -> None:
        self.path, self.kind, self.bounds, self.most = path, kind, bounds, bounds.most
        self.sha = hashlib.sha256()
        self.ids, self.lines = array("q"), array("Q")
        self.bins = ANSWER_BINS if kind == "questions" else PASSAGE_BINS
        self.counts = [0] * (len(self.bins) + 1)
        self.size = self.written = 0
        self.batch: list[bytes] = []
        if resumed is not None:
            self._reread(resumed)
        self.handle = path.open("ab" if resumed is not None else "wb")

    def _reread(self, resumed: Resumed) -> None:
        """Go on from the first `resumed.size` bytes of the file (the lines an interrupted check wrote): the file cut
        there, read again for its hash and ids' digests (hashlib's state cannot be saved); ValueError when it does
        not hold `resumed`'s records."""
        import msgspec

        with self.path.open("r+b") as handle:
            handle.truncate(resumed.size)
            decoder, rest = msgspec.json.Decoder(_Id), b""
            while block := handle.read(8 << 20):
                self.sha.update(block)
                data, end = rest + block, (rest + block).rfind(b"\n") + 1
                self.ids.extend(map(hash, (r.id for r in decoder.decode_lines(data[:end]))))
                rest = data[end:]
        if rest or len(self.ids) != len(resumed.lines):
            raise ValueError(f"{self.path} does not hold the {len(resumed.lines):,} records its state says")
        self.lines, self.counts = array("Q", resumed.lines), list(resumed.counts)
        self.size = self.written = resumed.size

    def checkpoint(self) -> None:
        """Hand every record added so far to the OS (an interrupted process goes on from here; not fsynced: after a
        crash of the machine itself a file that does not match its state is checked again from the start)."""
        self._flush()
        self.handle.flush()

    def add(self, record: dict[str, Any], line: int) -> None:
        encoded = orjson.dumps(record)
        self.written += len(encoded) + 1
        if len(encoded) > self.bounds.limits.max_line_bytes:
            most, unit = self.bounds.limits.max_line_bytes, self.bounds.unit
            raise UploadRefused(f"{self.bounds.filename}: {unit} {line} is longer than {most:,} bytes as a JSON line")
        if self.written > self.most:
            raise self.bounds.refusal(self.written, line)
        self.batch.append(encoded)
        if len(self.batch) >= self.BATCH:
            self._flush()
        self.ids.append(hash(record["id"]))  # within this process only: the second pass hashes the same way
        self.lines.append(line)
        text = record["golden_answers"][0] if self.kind == "questions" else record["contents"]
        self.counts[bisect.bisect_left(self.bins, len(text.split()))] += 1

    def add_batch(self, batch: Batch, line: int) -> bool:
        """Write a block's canonical lines (its first from `line`; none blank) at once; False, writing nothing, when
        they would pass the bounds (the block is then added a record at a time, which names the line)."""
        if self.written + len(batch.data) > self.most:
            return False
        self._flush()
        self.written += len(batch.data)
        self.handle.write(batch.data)
        self.sha.update(batch.data)
        self.size += len(batch.data)
        self.ids.frombytes(batch.digests)
        self.lines.extend(range(line, line + batch.records))
        self.counts = [a + b for a, b in zip(self.counts, batch.counts, strict=True)]
        return True

    def _flush(self) -> None:
        if self.batch:
            data = b"\n".join(self.batch) + b"\n"
            self.handle.write(data)
            self.sha.update(data)
            self.size += len(data)
            self.batch = []

    def finish(self, filename: str, fmt: str) -> Checked:
        self._flush()
        self.handle.close()
        if not self.ids:
            raise UploadRefused(f"{filename}: holds no records")
        self._duplicates(filename, "row" if fmt.startswith("parquet") else "line")
        labels = [f"≤{edge}" for edge in self.bins] + [f">{self.bins[-1]}"]
        lengths = dict(zip(labels, self.counts, strict=True))
        return Checked(self.path, self.sha.hexdigest(), self.size, len(self.ids), fmt, lengths)

    def _duplicates(self, filename: str, unit: str) -> None:
        """UploadRefused naming the first id that repeats, with both lines: digests sorted to find repeats, then a
        second pass over the written file for the ids whose digest repeats (a digest collision is no repeat)."""
        import numpy as np

        digests = np.sort(np.frombuffer(self.ids, dtype=np.int64))
        repeated = set(digests[1:][digests[1:] == digests[:-1]].tolist())
        if not repeated:
            return
        seen: dict[str, int] = {}
        with self.path.open(encoding="utf-8") as handle:
            for index, line in enumerate(handle):
                if self.ids[index] not in repeated:
                    continue
                identifier = orjson.loads(line)["id"]
                if identifier in seen:
                    first, second = self.lines[seen[identifier]], self.lines[index]
                    raise UploadRefused(
                        f"{filename}: {unit} {second}: field 'id' repeats {identifier!r} of {unit} {first}"
                    )
                seen[identifier] = index


def scratch_directory(root: Path | None = None) -> Path:
    """A new directory for one upload's files (the caller removes it)."""
    return Path(tempfile.mkdtemp(prefix="inspo-upload-", dir=root))
