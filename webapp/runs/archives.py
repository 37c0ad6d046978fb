"""Checkpoint archives: a byte-for-byte reproducible tar of a checkpoint's policy directory, streamed in chunks.

The worker hashes the stream when the checkpoint is saved; the download endpoint streams the same bytes, so the
stored sha256 is the digest of exactly what a user receives.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from inspo_engine.coevolution import POLICY_DIR
from webapp.core.errors import Conflict

BLOCK = tarfile.BLOCKSIZE
CHUNK = 1 << 20


@dataclass(frozen=True)
class ArchiveFile:
    name: str
    path: Path
    size: int


def policy_directory(checkpoint_path: str | Path) -> Path:
    """The Hugging Face directory inside an engine checkpoint."""
    return Path(checkpoint_path) / POLICY_DIR


class ArchiveRefused(Conflict):
    """The directory to archive, or a link inside it, leads out of the run's directory: nothing is read."""


def archive_files(directory: Path, prefix: str, *, root: Path) -> list[ArchiveFile]:
    """Regular files under `directory`, sorted by name, as `prefix/relative/path`. `directory` must be a real
    directory inside `root` (the run's directory), not a link; links inside it are left out, and one that leads
    outside `root` refuses the whole archive."""
    if directory.is_symlink() or not directory.resolve().is_relative_to(root.resolve()):
        raise ArchiveRefused(f"the checkpoint's {directory.name}/ leads outside its run's directory")
    files = []
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            if not path.resolve().is_relative_to(root.resolve()):
                raise ArchiveRefused(
                    f"{path.relative_to(directory)} in the checkpoint leads outside its run's directory"
                )
        elif path.is_file():
            files.append(path)
    return [ArchiveFile(f"{prefix}/{p.relative_to(directory).as_posix()}", p, p.stat().st_size) for p in files]


def _header(file: ArchiveFile) -> bytes:
    info = tarfile.TarInfo(file.name)
    info.size, info.mtime, info.mode = file.size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def archive_size(files: list[ArchiveFile]) -> int:
    return sum(len(_header(f)) + f.size + len(_padding(f.size)) for f in files) + 2 * BLOCK


def _file_parts(file: ArchiveFile) -> Iterator[tuple[bool, bytes]]:
    """(is_content, bytes) pieces of one file's entry: header, contents in chunks, padding."""
    yield False, _header(file)
    remaining = file.size
    with file.path.open("rb") as handle:
        while remaining:
            chunk = handle.read(min(CHUNK, remaining))
            if not chunk:
                raise OSError(f"{file.path} shrank while it was being archived")
            remaining -= len(chunk)
            yield True, chunk
    yield False, _padding(file.size)


END_OF_ARCHIVE = b"\0" * (2 * BLOCK)


def archive_stream(files: list[ArchiveFile]) -> Iterator[bytes]:
    """The tar's bytes: each file's header, contents and padding, then the end-of-archive blocks."""
    for file in files:
        for _, part in _file_parts(file):
            yield part
    yield END_OF_ARCHIVE


@dataclass(frozen=True)
class ArchiveDigest:
    sha256: str
    size: int
    files: list[dict[str, object]]


def archive_digest(files: list[ArchiveFile]) -> ArchiveDigest:
    """sha256 and size of the archive, plus each file's own sha256, in one pass over the files."""
    whole = hashlib.sha256()
    manifest: list[dict[str, object]] = []
    size = 0
    for file in files:
        own = hashlib.sha256()
        for is_content, part in _file_parts(file):
            whole.update(part)
            size += len(part)
            if is_content:
                own.update(part)
        manifest.append({"name": file.name, "bytes": file.size, "sha256": own.hexdigest()})
    whole.update(END_OF_ARCHIVE)
    return ArchiveDigest(whole.hexdigest(), size + len(END_OF_ARCHIVE), manifest)
