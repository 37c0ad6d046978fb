"""Checkpoint archives: a byte-for-byte reproducible tar of a checkpoint as it lies on disk — `inspo_state.json` (the
population with its lineage, the replay buffer and the loop's progress at that step) and `policy/` (the Hugging Face
directory), plus `training/` (the optimizer state) only when asked for — so an unpacked archive is a checkpoint the
engine reads (`eval --checkpoint`, and with the optimizer state `train --resume`).

The worker hashes both archives' bytes in one pass when the checkpoint is saved. The first download of either
writes the same bytes once to a file under INSPO_ARCHIVE_DIR (checked against that sha256); every download is then
that file, sent by the proxy in front or as a file response with Range support, so the stored sha256 and size are
those of exactly what a user receives.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from inspo_engine.checkpoints import MERGED_DIR, OPTIMIZER_DIR, POLICY_DIR, STATE_FILE
from webapp.core.errors import Conflict, Gone

if TYPE_CHECKING:
    from .models import Checkpoint

log = logging.getLogger(__name__)

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


def checkpoint_files(
    directory: Path, *, root: Path, layout: int = 2, optimizer: bool = False, merged: bool = False
) -> list[ArchiveFile]:
    """What the archive of the checkpoint `directory` holds, in order. Layout 2: `inspo_state.json` and `policy/`
    under the checkpoint's name, as on disk, then `training/` with `optimizer`; with `merged` (the last checkpoint
    of a LoRA run), the merged policy (`merged/` on disk) in place of the adapters as `policy/`, so that the
    unpacked archive is a checkpoint with a whole policy; layout 1 (checkpoints stored before archives carried the
    population): policy/'s files alone, directly under the checkpoint's name. Every file must lie in `root` (see
    `archive_files`)."""
    name = directory.name
    if layout == 1:
        return archive_files(directory / POLICY_DIR, name, root=root)
    state = directory / STATE_FILE
    files = []
    if (state.exists() or state.is_symlink()) and not state.resolve().is_relative_to(root.resolve()):
        raise ArchiveRefused(f"{STATE_FILE} in the checkpoint leads outside its run's directory")
    if state.is_file() and not state.is_symlink():
        files.append(ArchiveFile(f"{name}/{STATE_FILE}", state, state.stat().st_size))
    files += archive_files(directory / (MERGED_DIR if merged else POLICY_DIR), f"{name}/{POLICY_DIR}", root=root)
    if optimizer:
        files += archive_files(directory / OPTIMIZER_DIR, f"{name}/{OPTIMIZER_DIR}", root=root)
    return files


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
    return archive_digests(files, [])[0]


def archive_digests(files: list[ArchiveFile], extra: list[ArchiveFile]) -> tuple[ArchiveDigest, ArchiveDigest]:
    """The digests of the archive of `files` and of the archive of `files` then `extra`, reading every file once:
    the second archive starts with the first one's entries."""
    whole = hashlib.sha256()
    manifest: list[dict[str, object]] = []
    size, first = 0, None
    for index, file in enumerate([*files, *extra]):
        if index == len(files):
            first = _finished(whole, size, manifest)
        own = hashlib.sha256()
        for is_content, part in _file_parts(file):
            whole.update(part)
            size += len(part)
            if is_content:
                own.update(part)
        manifest.append({"name": file.name, "bytes": file.size, "sha256": own.hexdigest()})
    complete = _finished(whole, size, manifest)
    return first or complete, complete


def _finished(running: hashlib._Hash, size: int, manifest: list[dict[str, object]]) -> ArchiveDigest:
    """The digest of an archive whose entries `running` has hashed so far, once its end blocks follow."""
    ended = running.copy()
    ended.update(END_OF_ARCHIVE)
    return ArchiveDigest(ended.hexdigest(), size + len(END_OF_ARCHIVE), list(manifest))


# -- built archives: written once, then sent as files -------------------------------------------------------------


@dataclass(frozen=True)
class BuiltArchive:
    path: Path
    size: int


def archive_key(files: list[ArchiveFile], sha256: str) -> str:
    """Names one archive's contents: every file's name, size and modification time, and the recorded digest. Files
    rewritten under the same checkpoint give a new key, so a stale archive is never sent."""
    stats = [(f.name, f.size, f.path.stat().st_mtime_ns) for f in files]
    return hashlib.sha256(json.dumps([sha256, stats]).encode()).hexdigest()[:32]


def archive_write(files: list[ArchiveFile], destination: Path, *, expected_sha256: str = "") -> BuiltArchive:
    """Write the archive to `destination` atomically (a temporary file beside it, then a rename), readable by the
    proxy. With `expected_sha256`, bytes that differ from it are refused and nothing is left behind."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=".building-", suffix=".tar")
    try:
        with os.fdopen(handle, "wb") as out:
            for part in archive_stream(files):
                out.write(part)
                digest.update(part)
                size += len(part)
        if expected_sha256 and digest.hexdigest() != expected_sha256:
            raise ArchiveChanged("the checkpoint's files changed since it was saved (their sha256 differs)")
        os.chmod(temporary, 0o644)
        os.replace(temporary, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return BuiltArchive(destination, size)


class ArchiveChanged(Conflict):
    """The checkpoint's files no longer hash to the digest recorded when it was saved."""


def archive_evict(directory: Path, *, room_for: int, max_bytes: int) -> int:
    """Delete the oldest built archives until `room_for` more bytes fit in `max_bytes` (0: no limit). A file being
    sent stays readable to whoever has it open. Returns how many were deleted."""
    if not max_bytes or not directory.is_dir():
        return 0
    built = sorted((p.stat().st_mtime, p.stat().st_size, p) for p in directory.glob("*/*.tar"))
    total, deleted = sum(size for _, size, _ in built), 0
    for _, size, path in built:
        if total + room_for <= max_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            deleted += 1
        total -= size
    return deleted


def checkpoint_archive(
    *, checkpoint: Checkpoint, run_directory: Path, optimizer: bool = False, merged: bool = False
) -> BuiltArchive:
    """The checkpoint's archive (with its optimizer state when `optimizer`; with its merged policy in place of the
    adapters when `merged`) as a file under
    INSPO_ARCHIVE_DIR/<run id>/, built on first use. Concurrent first downloads build it once (a lock per archive).
    Refuses a checkpoint whose files (or optimizer state) are gone (410), lead outside the run's directory or
    changed since they were hashed (409)."""
    directory = Path(checkpoint.path)
    if not checkpoint.available or not policy_directory(directory).is_dir():
        raise Gone(f"the files of the checkpoint of step {checkpoint.step} are gone")
    if optimizer and not (checkpoint.optimizer_available and (directory / OPTIMIZER_DIR).is_dir()):
        raise Gone(
            f"the checkpoint of step {checkpoint.step} keeps no optimizer state: only the newest checkpoint of a run "
            "that can still resume does (checkpoint.optimizer_state 'latest')"
        )
    if merged and not (checkpoint.merged_sha256 and (directory / MERGED_DIR).is_dir()):
        raise Gone(
            f"the checkpoint of step {checkpoint.step} has no merged policy: a LoRA run writes one in its last "
            "checkpoint only; this one's policy/ holds the adapters, which peft merges onto the base model"
        )
    files = checkpoint_files(
        directory, root=run_directory, layout=checkpoint.layout, optimizer=optimizer, merged=merged
    )
    sha256 = checkpoint.merged_sha256 if merged else checkpoint.optimizer_sha256 if optimizer else checkpoint.sha256
    variant = "merged" if merged else "optimizer" if optimizer else "checkpoint"
    root = Path(settings.INSPO_ARCHIVE_DIR)
    path = root / str(checkpoint.run_id) / f"{checkpoint.pk}-{variant}-{archive_key(files, sha256)}.tar"
    if path.is_file():
        return BuiltArchive(path, path.stat().st_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return BuiltArchive(path, path.stat().st_size)
        archive_evict(root, room_for=archive_size(files), max_bytes=settings.INSPO_ARCHIVE_MAX_BYTES)
        for stale in path.parent.glob(f"{checkpoint.pk}-{variant}-*.tar"):
            stale.unlink(missing_ok=True)  # an archive of this checkpoint's earlier files
        built = archive_write(files, path, expected_sha256=sha256)
    log.info("built the %s archive of checkpoint %s (%d bytes)", variant, checkpoint.pk, built.size)
    return built
