"""Reads of the data a user may see: their teams' datasets and the shared ones (another team's are a 404, as is
one that does not exist), each with its splits, sizes, length histogram, a preview of its rows, the runs of the
user's teams that used it, and its index jobs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from webapp.accounts.permissions import AnyUser
from webapp.accounts.selectors import team_list

from .models import Dataset, DatasetUse, DatasetVersion, IndexJob
from .references import OWN_FIRST, data_offered

PREVIEW_ROWS = 20


def dataset_list(*, user: AnyUser, team: str | None = None, kind: str | None = None) -> QuerySet[Dataset]:
    """Datasets of the user's teams (or of the one named by slug) and the shared ones, by name."""
    if not user.is_authenticated:
        return Dataset.objects.none()
    teams = team_list(user=user)
    if team:
        teams = teams.filter(slug=team)
    datasets = Dataset.objects.filter(Q(team__in=teams) | Q(team__isnull=True)).select_related("team")
    if kind:
        datasets = datasets.filter(kind=kind)
    return datasets.prefetch_related("versions").order_by(OWN_FIRST, "team_id", "name", "id")


def dataset_get(*, user: AnyUser, dataset_id: int) -> Dataset:
    dataset = dataset_list(user=user).filter(pk=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


@dataclass(frozen=True)
class SplitSummary:
    """A split as of the dataset's newest version: its file's version, records, size and length histogram."""

    split: str
    version: int
    records: int
    size_bytes: int
    sha256: str
    lengths: dict[str, int]


def dataset_splits(*, dataset: Dataset) -> list[SplitSummary]:
    newest: dict[str, DatasetVersion] = {}
    for version in dataset.versions.all():
        if version.split not in newest or version.number > newest[version.split].number:
            newest[version.split] = version
    return [
        SplitSummary(v.split, v.number, v.records, v.size_bytes, v.sha256, dict(v.lengths))
        for v in sorted(newest.values(), key=lambda v: v.split)
    ]


def dataset_preview(*, dataset: Dataset, split: str | None = None, rows: int = PREVIEW_ROWS) -> list[dict[str, Any]]:
    """The first `rows` records of a split's newest file (the first split when none is named), read from storage;
    none when the file cannot be read (see `dataset_files_missing`)."""
    from .services import data_storage

    splits = {s.split: s for s in dataset_splits(dataset=dataset)}
    chosen = split if split in splits else next(iter(splits), None)
    if chosen is None:
        return []
    version = dataset.versions.filter(split=chosen).order_by("-number").first()
    assert version is not None
    records: list[dict[str, Any]] = []
    try:
        with data_storage().open(version.file, "rb") as handle:
            for line in handle:
                records.append(json.loads(line))
                if len(records) >= rows:
                    break
    except (OSError, ValueError):  # missing from the storage, or damaged there
        return []
    return records


def dataset_files_missing(*, dataset: Dataset) -> list[DatasetVersion]:
    """The dataset's versions whose file the data storage no longer holds (runs that name them fail)."""
    from .services import data_storage

    storage = data_storage()
    return [v for v in dataset.versions.order_by("number") if not storage.exists(v.file)]


def dataset_runs(*, dataset: Dataset, user: AnyUser) -> QuerySet[DatasetUse]:
    """The uses of the dataset by runs of the user's teams (a shared dataset's other users stay unseen)."""
    uses = DatasetUse.objects.filter(version__dataset=dataset, run__team__in=team_list(user=user))
    return uses.select_related("run", "version").order_by("-run__created_at")


def index_job_list(*, dataset: Dataset) -> QuerySet[IndexJob]:
    return IndexJob.objects.filter(version__dataset=dataset).select_related("version")


def index_job_get(*, user: AnyUser, job_id: int) -> IndexJob:
    job = IndexJob.objects.filter(pk=job_id, version__dataset__in=dataset_list(user=user)).first()
    if job is None:
        raise Http404("no such index job")
    return job


BUILTIN_INDEX = "The built-in corpus (a few hundred passages) is indexed as the run starts, in seconds."
REMOTE_INDEX = "remote reads no corpus here: your Search-R1 server (env.retriever_url in Overrides) searches its own."


def corpus_index_texts(*, teams: Any) -> dict[str, dict[str, str]]:
    """Per corpus a run form offers (`data_offered`; 'builtin' too), per retriever: what a run that searches it
    that way finds, from the index jobs of its newest version as a run reads them (`indexing.run_index_wait`): built
    (it searches at once), being built or queued (it waits), none yet (it starts a job and waits), or the last job
    failed or was cancelled (it builds the index itself)."""
    texts = {"builtin": {"bm25": BUILTIN_INDEX, "dense": BUILTIN_INDEX, "remote": REMOTE_INDEX}}
    offered = data_offered(teams, "corpus")
    newest: dict[int, tuple[str, DatasetVersion]] = {}
    for reference, dataset in offered.items():
        version = dataset.versions.order_by("-number").first()
        if version is not None:
            newest[version.pk] = (reference, version)
    latest: dict[tuple[int, str], IndexJob] = {}
    for job in IndexJob.objects.filter(version_id__in=newest).order_by("created_at", "pk"):
        latest[(job.version_id, job.method)] = job
    for version_id, (reference, version) in newest.items():
        texts[reference] = {"remote": REMOTE_INDEX}
        for method in ("bm25", "dense"):
            texts[reference][method] = _index_text(reference, version, method, latest.get((version_id, method)))
    return texts


def _index_text(reference: str, version: DatasetVersion, method: str, job: IndexJob | None) -> str:
    name = f"{reference}@{version.number}"
    if job is None:
        return (
            f"{name} has no {method} index yet: the run starts its index job and waits for it (or build it now on its "
            "Data page)."
        )
    if job.status == IndexJob.Status.DONE:
        return f"{name} has a {method} index (job {job.pk}): the run searches it at once."
    if job.status == IndexJob.Status.RUNNING:
        done = f"{job.passages_done} / {job.passages_total} passages" if job.passages_total else "started"
        return f"{name}'s {method} index is being built (job {job.pk}, {done}): the run waits for it."
    if job.status == IndexJob.Status.QUEUED:
        return f"{name}'s {method} index job {job.pk} is queued: the run waits for it."
    return f"{name}'s last {method} index job ({job.pk}) {job.status}: the run builds the index itself as it starts."
