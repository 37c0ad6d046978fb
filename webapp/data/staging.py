"""Uploads seen before they are kept: the Data page's upload, see, confirm. The file is sent once and checked in
full as any upload is; its canonical JSONL is staged in the team's staging folder (INSPO_DATA_DIR/staging/<team>)
with an expiry, and its first rows are shown as they will be read. Confirming keeps it as the next version without
sending it again; discarding it, or its expiry, deletes the file.

What a staged upload holds counts against the team's data limit while it is staged (a team cannot stage past its
limit), never after: a confirmed one counts as its version, a discarded or expired one not at all. A team has at
most `MOST_STAGED` at a time (a new one discards its oldest), and every stage, read or confirm first deletes the
expired ones and any staging file no row names (a request killed mid-way), so nothing is left behind.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any
from uuid import UUID, uuid4

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.http import Http404
from django.utils import timezone

from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import AnyUser, require_role
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput

from .formats import Checked, scratch_directory
from .models import DatasetVersion, StagedUpload
from .services import CORPUS_SPLIT, DEFAULT_SPLIT, Uploaded, dataset_keep, upload_checked, upload_errors
from .shapes import NO_MAPPING, FieldMap

STAGED_FOR = timedelta(hours=1)
"""How long a staged upload waits for its confirm."""
MOST_STAGED = 3
"""Staged uploads a team may hold at once; a new one discards the oldest."""
PREVIEW_ROWS = 10
"""The first records shown."""
SHOWN_CHARS = 300
"""A shown passage (or question) is cut after this many characters."""


def staging_root() -> Path:
    return Path(settings.INSPO_DATA_DIR) / "staging"


def upload_stage(
    *,
    team: Team,
    user: User,
    name: str,
    kind: str,
    upload: IO[bytes],
    filename: str,
    split: str = "",
    mapping: FieldMap = NO_MAPPING,
) -> StagedUpload:
    """Check `upload` as `dataset_upload` does (the same 400s and 413s, nothing kept of a refused file) and stage its
    canonical file for the team to confirm; the staged upload names its first rows, its shape and where its ids
    come from."""
    require_role(user, team, Role.MEMBER)
    upload_errors(name=name, kind=kind, split=split, mapping=mapping, team=team)
    staged_expire()
    split = CORPUS_SPLIT if kind == "corpus" else split or DEFAULT_SPLIT
    folder = staging_root() / str(team.pk)
    folder.mkdir(parents=True, exist_ok=True)
    workdir = scratch_directory(folder)  # on the staging folder's disk: staging the file is a rename
    try:
        checked = upload_checked(
            upload, team=team, filename=filename, kind=kind, workdir=workdir, mapping=mapping,  # type: ignore[arg-type]
            reserved=_staged_bytes(team),
        )  # fmt: skip
        token = uuid4()
        path = folder / f"{token}.jsonl"
        shutil.move(checked.path, path)  # a rename, unless the check wrote it on another disk
        try:
            staged = StagedUpload.objects.create(
                id=token, team=team, created_by=user, name=name, kind=kind, split=split, path=str(path),
                sha256=checked.sha256, size_bytes=checked.size, records=checked.records,
                source_name=Path(filename).name[:255], source_format=checked.source_format, shape=checked.shape,
                ids_from=checked.ids, lengths=checked.lengths, rows=_first_rows(path),
                mapping={"question_field": mapping.question, "answers_field": mapping.answers, "id_field": mapping.id},
                expires_at=timezone.now() + STAGED_FOR,
            )  # fmt: skip
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for old in StagedUpload.objects.filter(team=team).order_by("-created_at")[MOST_STAGED:]:
        _drop(old)
    return staged


def staged_get(*, user: AnyUser, staged_id: UUID) -> StagedUpload:
    """A staged upload of one of the user's teams that has not expired; 404 otherwise (another team's too)."""
    staged_expire()
    if not user.is_authenticated:
        raise Http404("no such staged upload")
    staged = (
        StagedUpload.objects.filter(pk=staged_id, team__in=team_list(user=user), expires_at__gt=timezone.now())
        .select_related("team")
        .first()
    )
    if staged is None:
        raise Http404("no such staged upload (confirmed, discarded or expired: upload the file again)")
    return staged


def staged_existing(staged: StagedUpload) -> DatasetVersion | None:
    """The team's version that already holds the same content (confirming then keeps nothing new)."""
    return (
        DatasetVersion.objects.filter(dataset__team=staged.team_id, sha256=staged.sha256, split=staged.split)
        .filter(dataset__kind=staged.kind)
        .select_related("dataset")
        .first()
    )


def staged_confirm(*, staged: StagedUpload, user: User) -> Uploaded:
    """Keep a staged upload as the next version of its dataset (its file moved into the data storage), or as the
    version that already holds the same content; 404 when it was confirmed or discarded meanwhile. A refusal (the
    name taken by the other kind since, the team's limit) leaves it staged."""
    require_role(user, staged.team, Role.MEMBER)
    with transaction.atomic():
        row = StagedUpload.objects.select_for_update().filter(pk=staged.pk, expires_at__gt=timezone.now()).first()
        if row is None:
            raise Http404("no such staged upload (confirmed, discarded or expired: upload the file again)")
        path = Path(row.path)
        if not path.exists():
            row.delete()
            raise InvalidInput({"file": ["the staged file is gone (the server was cleaned): upload the file again"]})
        upload_errors(name=row.name, kind=row.kind, split="", mapping=NO_MAPPING, team=row.team)
        checked = Checked(
            path, row.sha256, row.size_bytes, row.records, row.source_format, row.lengths, row.shape, row.ids_from
        )
        uploaded = dataset_keep(
            team=row.team, user=user, name=row.name, kind=row.kind, split=row.split, checked=checked,
            filename=row.source_name,
        )  # fmt: skip
        row.delete()
    path.unlink(missing_ok=True)  # the version's file was moved, or the same content was there already
    return uploaded


def staged_discard(*, staged: StagedUpload, user: User) -> None:
    require_role(user, staged.team, Role.MEMBER)
    _drop(staged)


def staged_expire(*, now: datetime | None = None) -> int:
    """Delete the expired staged uploads with their files, and every file in the staging folders that no staged
    upload names and is older than `STAGED_FOR` (a request killed between writing it and recording it); the count
    of staged uploads deleted."""
    now = now or timezone.now()
    expired = list(StagedUpload.objects.filter(expires_at__lte=now))
    for staged in expired:
        _drop(staged)
    root = staging_root()
    if root.is_dir():
        oldest = (now - STAGED_FOR).timestamp()
        named = set(StagedUpload.objects.values_list("path", flat=True))
        for entry in root.glob("*/*"):
            try:
                stale = entry.stat().st_mtime < oldest and str(entry) not in named
            except FileNotFoundError:
                continue
            if stale:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    return len(expired)


def _drop(staged: StagedUpload) -> None:
    StagedUpload.objects.filter(pk=staged.pk).delete()
    Path(staged.path).unlink(missing_ok=True)


def _staged_bytes(team: Team) -> int:
    live = StagedUpload.objects.filter(team=team, expires_at__gt=timezone.now())
    return int(live.aggregate(total=Sum("size_bytes"))["total"] or 0)


def _first_rows(path: Path) -> list[dict[str, Any]]:
    """The canonical file's first records, long texts cut for showing."""
    rows: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        for line in handle:
            record = orjson.loads(line)
            rows.append({k: _cut(v) for k, v in record.items()})
            if len(rows) >= PREVIEW_ROWS:
                break
    return rows


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return value[:SHOWN_CHARS] + "…"
    if isinstance(value, list):
        return [_cut(v) for v in value[:20]]
    return value
