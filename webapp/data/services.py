"""What a team does with its data: upload a file as a new version of a named dataset (checked while it streams,
stored once by sha256), delete a dataset no run uses, and the operator's registration of shared data. References in
configs (`data:<name>[@<version>]`) are resolved and pinned here too, and runs record the versions they use."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from uuid import UUID

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import IntegrityError, transaction
from django.db.models import Sum

from inspo_engine.config import split_errors
from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import Conflict, InvalidInput, ServiceError

from .formats import KINDS, Checked, Kind, Limits, OverBudget, UploadRefused, check_upload, scratch_directory
from .models import Dataset, DatasetJobUse, DatasetUse, DatasetVersion, RetiredName
from .registering import Report, check_file
from .shapes import NO_MAPPING, FieldMap

if TYPE_CHECKING:
    from webapp.runs.models import EvaluationRequest, Heatmap

DATA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CORPUS_SPLIT = "corpus"
DEFAULT_SPLIT = "train"


class TooLarge(ServiceError):
    """An upload over the operator's size limit."""

    status = 413


@dataclass(frozen=True)
class Uploaded:
    """The version an upload became; `created` False when the same content was already there."""

    version: DatasetVersion
    created: bool
    shape: str = ""
    """The records' shape as detected (flashrag, verl, nq_open, triviaqa; `+mapping` with a field mapping)."""
    ids: str = ""
    """Where the ids came from: a field's dotted path, or 'line number'."""


def data_storage() -> Storage:
    """The storage that holds every dataset's files (STORAGES['data'])."""
    return storages["data"]


def limits(*, room: int = 1 << 62) -> Limits:
    """The operator's bounds on one upload; `room`: what the canonical file may hold (the team's data left)."""
    return Limits(
        max_bytes=settings.INSPO_DATA_MAX_UPLOAD_BYTES,
        max_expanded_bytes=settings.INSPO_DATA_MAX_UPLOAD_BYTES * settings.INSPO_DATA_MAX_GZIP_RATIO,
        max_ratio=settings.INSPO_DATA_MAX_GZIP_RATIO,
        max_line_bytes=settings.INSPO_DATA_MAX_LINE_BYTES,
        max_output_bytes=room,
    )


def _name_errors(name: str, kind: str, split: str) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not DATA_NAME.fullmatch(name) or ".." in name:
        errors["name"] = ["a name: letters, digits, '_', '.', '-', at most 64, starting with a letter or digit"]
    if kind not in KINDS:
        errors["kind"] = [f"one of {', '.join(KINDS)}"]
    if kind == "corpus" and split not in ("", CORPUS_SPLIT):
        errors["split"] = ["a corpus has no splits"]
    elif split and split_errors(split, "split"):
        errors["split"] = [split_errors(split, "split")[0].message]
    return errors


def dataset_upload(
    *,
    team: Team,
    user: User,
    name: str,
    kind: str,
    upload: IO[bytes],
    filename: str,
    split: str = "",
    mapping: FieldMap = NO_MAPPING,
) -> Uploaded:
    """Check `upload` while reading it once, and keep it as the next version of the team's dataset `name` (created
    when new): a questions file holds one split (`train` unless named), a corpus none. The same content already in
    the team's data is that version again (nothing stored twice). InvalidInput (400) naming the file, line and field
    of the first bad record, or a bad name; TooLarge (413) past the upload limit; 400 past the team's total. Nothing
    is kept of a refused upload."""
    require_role(user, team, Role.MEMBER)
    upload_errors(name=name, kind=kind, split=split, mapping=mapping, team=team)  # before the content is read
    split = CORPUS_SPLIT if kind == "corpus" else split or DEFAULT_SPLIT
    workdir = scratch_directory()
    try:
        checked = upload_checked(upload, team=team, filename=filename, kind=kind, workdir=workdir, mapping=mapping)  # type: ignore[arg-type]
        return dataset_keep(team=team, user=user, name=name, kind=kind, split=split, checked=checked, filename=filename)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def upload_errors(*, name: str, kind: str, split: str, mapping: FieldMap, team: Team) -> None:
    """InvalidInput for a bad name, kind, split or mapping (as sent), or a name the team has for the other kind:
    what is refused before the file is read."""
    errors = _name_errors(name, kind, split) | mapping.errors()
    if errors:
        raise InvalidInput(errors)
    other = Dataset.objects.filter(team=team, name=name).exclude(kind=kind).values_list("kind", flat=True).first()
    if other is not None:
        raise _other_kind(name, other, kind)


def dataset_keep(
    *, team: Team, user: User, name: str, kind: str, split: str, checked: Checked, filename: str
) -> Uploaded:
    """Keep a checked file (`split` as resolved) as the next version of the team's dataset `name`, its canonical file
    moved into the data storage; the version it already is when the team holds the same content."""
    existing = DatasetVersion.objects.filter(dataset__team=team, sha256=checked.sha256, split=split).first()
    if existing is not None and existing.dataset.kind == kind:
        _store(checked, move=True)  # restores its file when the storage lost it
        return Uploaded(existing, created=False, shape=checked.shape, ids=checked.ids)
    _team_total_check(team, checked.size)
    stored, new = _store(checked, move=True)  # the caller's copy is deleted next: a rename will do
    try:
        version = _version_create(team, user, name, kind, split, checked, stored, filename)
        return Uploaded(version, created=True, shape=checked.shape, ids=checked.ids)
    except BaseException:
        if new:  # refused after all (a concurrent upload of the other kind): nothing is kept
            _unstore([(checked.sha256, stored)])
        raise


def upload_checked(
    upload: IO[bytes],
    *,
    team: Team,
    filename: str,
    kind: Kind,
    workdir: Path,
    mapping: FieldMap = NO_MAPPING,
    reserved: int = 0,
) -> Checked:
    """The upload checked and written as canonical JSONL, stopped as soon as it passes the team's data left (less
    `reserved`: the bytes its staged uploads hold)."""
    size = getattr(upload, "size", None)
    if size is not None and size > settings.INSPO_DATA_MAX_UPLOAD_BYTES:
        raise TooLarge(too_large_message(filename))
    most = settings.INSPO_DATA_TEAM_MAX_BYTES
    room = max(0, most - _team_used(team) - reserved) if most else 1 << 62
    try:
        return check_upload(
            upload, filename=filename, kind=kind, limits=limits(room=room), workdir=workdir, mapping=mapping
        )
    except OverBudget:
        raise _over_quota(_team_used(team), room, most, written="more than ") from None
    except UploadRefused as refused:
        if refused.status == 413:
            raise TooLarge(refused.message) from None
        raise InvalidInput({"file": [refused.message]}) from None


def too_large_message(filename: str = "the file") -> str:
    return f"{filename}: the file is larger than the upload limit of {settings.INSPO_DATA_MAX_UPLOAD_BYTES:,} bytes"


def _team_total_check(team: Team, adding: int) -> None:
    most = settings.INSPO_DATA_TEAM_MAX_BYTES
    if not most:
        return
    used = _team_used(team)
    if used + adding > most:
        raise _over_quota(used, adding, most)


def _over_quota(used: int, adding: int, most: int, *, written: str = "") -> InvalidInput:
    return InvalidInput(
        {
            "file": [
                f"your team's data would hold {written}{used + adding:,} bytes, over its limit of {most:,} "
                f"({max(0, most - used):,} left): delete a dataset no run uses, or ask the operator"
            ]
        }
    )


def _team_used(team: Team) -> int:
    return DatasetVersion.objects.filter(dataset__team=team).aggregate(total=Sum("size_bytes"))["total"] or 0


def _store(checked: Checked, *, move: bool = False) -> tuple[str, bool]:
    """The canonical file in the data storage under its sha256 (kept once, whoever uploads it), and whether this
    call saved it; `move`: a filesystem storage may take the file itself (a rename on the same disk) rather than a
    copy of it."""
    storage = data_storage()
    name = f"{checked.sha256[:2]}/{checked.sha256}.jsonl"
    if storage.exists(name):
        return name, False
    with checked.path.open("rb") as handle:
        content = _Movable(handle, name=name, path=checked.path) if move else File(handle, name=name)
        return str(storage.save(name, content)), True


class _Movable(File):  # type: ignore[type-arg]
    """A file a filesystem storage moves into place (Django's storage does so for a file with a temporary path)."""

    def __init__(self, handle: IO[bytes], *, name: str, path: Path) -> None:
        super().__init__(handle, name=name)
        self.path = path

    def temporary_file_path(self) -> str:
        return str(self.path)


def _unstore(files: Sequence[tuple[str, str]]) -> None:
    """Delete these (sha256, stored name) files from the data storage, each unless a version still holds it."""
    storage = data_storage()
    for sha256, name in files:
        if not DatasetVersion.objects.filter(sha256=sha256).exists():
            storage.delete(name)


def _version_create(
    team: Team | None, user: User | None, name: str, kind: str, split: str, checked: Checked, stored: str, filename: str
) -> DatasetVersion:
    with transaction.atomic():
        dataset = _dataset_locked(team, user, name, kind)
        last = dataset.versions.order_by("-number").values_list("number", flat=True).first()
        if last is None:  # after the numbers of a deleted dataset of this name: a pin never changes its meaning
            last = RetiredName.objects.filter(team=team, name=name).values_list("last_number", flat=True).first() or 0
        return DatasetVersion.objects.create(
            dataset=dataset,
            number=last + 1,
            split=split,
            sha256=checked.sha256,
            file=stored,
            size_bytes=checked.size,
            records=checked.records,
            source_name=Path(filename).name[:255],
            source_format=checked.source_format,
            lengths=checked.lengths,
            created_by=user,
        )


def _dataset_locked(team: Team | None, user: User | None, name: str, kind: str) -> Dataset:
    """The dataset row, created when new, locked for the version number; a name of the other kind is a 400."""
    try:
        with transaction.atomic():
            dataset, _ = Dataset.objects.get_or_create(
                team=team, name=name, defaults={"kind": kind, "created_by": user}
            )
    except IntegrityError:  # created by a concurrent upload a moment ago
        dataset = Dataset.objects.get(team=team, name=name)
    dataset = Dataset.objects.select_for_update().get(pk=dataset.pk)
    if dataset.kind != kind:
        raise _other_kind(name, dataset.kind, kind)
    return dataset


def _other_kind(name: str, kind: str, wanted: str) -> InvalidInput:
    return InvalidInput({"kind": [f"data:{name} is a {kind} dataset; upload a {wanted} under another name"]})


LIVE_JOBS = ("queued", "running")
"""The states of an evaluation request or a heatmap in which it will still read its data."""


def dataset_delete(*, dataset: Dataset, user: User) -> None:
    """Delete the team's dataset and its files (those no other version shares); Conflict (409) while a run uses it
    or a queued or running evaluation or heatmap names it, naming them. Its name keeps its last version number
    (`RetiredName`), so a later upload under the name never reuses a number."""
    if dataset.team is None:
        raise InvalidInput({"dataset": ["shared data is the operator's: it cannot be deleted here"]})
    require_role(user, dataset.team, Role.MEMBER)
    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        uses = DatasetUse.objects.filter(version__dataset=dataset).select_related("run")
        names = sorted({f"{use.run.name} ({use.run.pk})" for use in uses[:20]})
        if names:
            raise Conflict(f"data:{dataset.name} is used by {len(names)} run(s): {', '.join(names)}; delete them first")
        _no_live_jobs(dataset)
        files = list(dataset.versions.values_list("sha256", "file"))
        last = max((number for number in dataset.versions.values_list("number", flat=True)), default=0)
        RetiredName.objects.update_or_create(team=dataset.team, name=dataset.name, defaults={"last_number": last})
        dataset.delete()
    _unstore(files)


def _no_live_jobs(dataset: Dataset) -> None:
    """Conflict naming the queued or running evaluations and heatmaps that will read the dataset."""
    uses = DatasetJobUse.objects.filter(version__dataset=dataset)
    evaluations = uses.filter(evaluation__status__in=LIVE_JOBS).values_list("evaluation_id", "evaluation__run__name")
    heatmaps = uses.filter(heatmap__status__in=LIVE_JOBS).values_list("heatmap_id", "heatmap__run__name")
    jobs = sorted(
        {f"evaluation {pk} of run {run}" for pk, run in evaluations[:20]}
        | {f"heatmap {pk} of run {run}" for pk, run in heatmaps[:20]}
    )
    if jobs:
        raise Conflict(
            f"data:{dataset.name} is named by {len(jobs)} queued or running job(s): {', '.join(jobs)}; "
            "wait for them to end"
        )


def shared_register(
    *,
    path: Path,
    name: str,
    kind: str,
    split: str = "",
    progress: Callable[[Report], None] | None = None,
    every: float = 5.0,
) -> Uploaded:
    """The operator's file under INSPO_SHARED_DATA_DIR as shared data, checked like an upload but under no upload or
    team limit, streaming in bounded memory, and resumable: an interrupted call leaves its partial canonical file and
    state under INSPO_DATA_DIR/registering, and the next call for the same file, name and split goes on from there
    (`registering`). `progress` hears a report every `every` seconds."""
    errors = _name_errors(name, kind, split)
    if errors:
        raise InvalidInput(errors)
    split = CORPUS_SPLIT if kind == "corpus" else split or DEFAULT_SPLIT
    key = hashlib.sha256(f"{path.resolve()}\0{name}\0{kind}\0{split}".encode()).hexdigest()[:16]
    workdir = Path(settings.INSPO_DATA_DIR) / "registering" / key
    unbounded = Limits(max_bytes=1 << 62, max_expanded_bytes=1 << 62, max_ratio=1000, max_line_bytes=1 << 24)
    try:
        checked = check_file(path, kind=kind, limits=unbounded, workdir=workdir, progress=progress, every=every)  # type: ignore[arg-type]
    except UploadRefused as refused:
        shutil.rmtree(workdir, ignore_errors=True)  # a bad file: nothing of it is kept
        raise InvalidInput({"file": [refused.message]}) from None
    try:
        existing = DatasetVersion.objects.filter(dataset__team=None, dataset__name=name, sha256=checked.sha256).first()
        if existing is not None:
            return Uploaded(existing, created=False)
        stored, _ = _store(checked, move=True)
        return Uploaded(_version_create(None, None, name, kind, split, checked, stored, path.name), created=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_data_record(*, run_id: UUID, versions: Sequence[DatasetVersion]) -> None:
    """Note which versions a run names (the Data page lists the runs; a delete is refused while they exist)."""
    _versions_kept(versions)
    DatasetUse.objects.bulk_create([DatasetUse(version=v, run_id=run_id) for v in versions], ignore_conflicts=True)


def job_data_record(
    *, team: Team, names: Sequence[str], evaluation: EvaluationRequest | None = None, heatmap: Heatmap | None = None
) -> None:
    """Note which versions an evaluation request or a heatmap names (`names`: its benchmarks, data references
    pinned): a delete is refused while it is queued or running. Inside the transaction that creates the job."""
    from .references import data_snapshot, is_reference

    versions = [
        version
        for name in names
        if is_reference(name)
        for version in data_snapshot(name, team=team, field="benchmarks", kind="questions").versions
    ]
    _versions_kept(versions)
    DatasetJobUse.objects.bulk_create(
        [DatasetJobUse(version=v, evaluation=evaluation, heatmap=heatmap) for v in versions]
    )


def _versions_kept(versions: Sequence[DatasetVersion]) -> None:
    """Lock the versions' datasets against a delete until the caller's transaction ends (a delete takes the same
    lock first); InvalidInput when one was deleted since it was resolved."""
    datasets = {v.dataset_id for v in versions}
    kept = set(Dataset.objects.select_for_update().filter(pk__in=datasets).values_list("pk", flat=True))
    gone = sorted({f"data:{v.dataset.name}" for v in versions if v.dataset_id not in kept})
    if gone:
        raise InvalidInput({"config": [f"{', '.join(gone)} was deleted a moment ago"]})
