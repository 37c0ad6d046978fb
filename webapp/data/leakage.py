"""Leakage, before a verdict: which questions of an evaluation split were also in a training split, exactly or nearly
(`inspo_engine.env.overlap`: normalised text, or idf-weighted Jaccard over word bigrams ≥ 0.8).

A report is computed once per pair of question files and kept in the data storage under their sha256s
(`leakage/v<SCHEMA>/<train sha256>/<evaluation sha256>.json`), so every team, run and page with the same two files
reads the same report and nothing names whose files they were. A pair of up to `SYNC_QUESTIONS` questions is checked
on first read (well under a second); a larger one by a task on a CPU worker, while the pages say it is being checked.
The built-in set's splits are question files too, digested from their content.

It knows files and configs, not pages: the Data page, the run page, Table 1 and the experiment verdicts read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.core.files.base import ContentFile

from inspo_engine.config import EvalConfig
from inspo_engine.env.datasets import BUILTIN
from inspo_engine.env.overlap import NEAR_DUPLICATE_THRESHOLD, find_overlap
from webapp.accounts.models import Team
from webapp.core.errors import InvalidInput

from .models import Dataset, DatasetVersion
from .references import data_snapshot, is_reference

log = logging.getLogger(__name__)

LEAKAGE_TASK = "workers.tasks.check_leakage"
SCHEMA = 1
"""Bumped whenever what a report holds or how it is computed changes: older reports are then computed again."""
SYNC_QUESTIONS = 50_000
"""A pair with at most this many questions (both files together) is checked in the request that first asks."""
EXAMPLES = 5
PENDING_S = 900
"""A task asked for longer ago than this without a report is asked for again (a lost or failed task)."""
TRAIN_SPLIT = "train"

Status = Literal["done", "checking", "failed"]


@dataclass(frozen=True)
class QuestionFile:
    """One split's questions: a dataset version's file or a built-in split; `spec` names it for the task."""

    label: str
    sha256: str
    records: int
    spec: str


def version_file(version: DatasetVersion) -> QuestionFile:
    dataset = version.dataset
    label = f"data:{'shared/' if dataset.shared else ''}{dataset.name} v{version.number} {version.split}"
    return QuestionFile(label, version.sha256, version.records, f"version:{version.pk}")


def builtin_file(split: str) -> QuestionFile:
    digest, records = _builtin_digest(split)
    return QuestionFile(f"builtin {split}", digest, records, f"builtin:{split}")


@functools.cache
def _builtin_digest(split: str) -> tuple[str, int]:
    questions = _builtin_questions(split)
    text = json.dumps(questions, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"builtin:{split}:{text}".encode()).hexdigest(), len(questions)


def _builtin_questions(split: str) -> list[tuple[str, str]]:
    from inspo_engine.env.builtin import SPLITS, builtin_dataset

    if split not in SPLITS:
        return []
    return [(q.id, q.text) for q in builtin_dataset().split(split)]


def file_from_spec(spec: str) -> QuestionFile:
    """The file a task was sent for (`version:<id>` or `builtin:<split>`); DatasetVersion.DoesNotExist once deleted."""
    kind, _, value = spec.partition(":")
    if kind == "builtin":
        return builtin_file(value)
    return version_file(DatasetVersion.objects.select_related("dataset").get(pk=int(value)))


def _questions(file: QuestionFile) -> list[tuple[str, str]]:
    """(id, question) of every record, in file order."""
    from .services import data_storage

    kind, _, value = file.spec.partition(":")
    if kind == "builtin":
        return _builtin_questions(value)
    version = DatasetVersion.objects.get(pk=int(value))
    rows = []
    with data_storage().open(version.file, "rb") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                rows.append((str(record["id"]), str(record["question"])))
    return rows


# -- the report ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leakage:
    """What one evaluation file shares with one training file. `overlaps`: evaluation question id → (training
    question id, kind, similarity), for each evaluation question that is also in training."""

    train: str
    evaluation: str
    status: Status
    questions: int = 0
    train_questions: int = 0
    threshold: float = NEAR_DUPLICATE_THRESHOLD
    overlaps: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def exact(self) -> int:
        return sum(kind == "exact" for _, kind, _ in self.overlaps.values())

    @property
    def near(self) -> int:
        return sum(kind == "near" for _, kind, _ in self.overlaps.values())

    @property
    def leaked(self) -> int:
        return len(self.overlaps)

    @property
    def question_ids(self) -> frozenset[str]:
        """The evaluation questions that were also in training: what `exclude_overlap` leaves out."""
        return frozenset(self.overlaps)

    @property
    def text(self) -> str:
        """The finding in words, as the pages write it."""
        if self.status == "checking":
            return f"being checked against {self.train}"
        if self.status == "failed":
            return f"could not be checked against {self.train}: {self.error}"
        if not self.leaked:
            return f"none of {self.questions} questions also in training ({self.train})"
        return (
            f"{self.leaked} of {self.questions} questions also in training ({self.train}): {self.exact} exact, "
            f"{self.near} near (similarity ≥ {self.threshold})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as the API answers it: the counts, the examples and every overlapping question's ids."""
        return {
            "train": self.train,
            "evaluation": self.evaluation,
            "status": self.status,
            "questions": self.questions,
            "train_questions": self.train_questions,
            "leaked": self.leaked,
            "exact": self.exact,
            "near": self.near,
            "threshold": self.threshold,
            "method": "normalised text, or idf-weighted Jaccard over word bigrams ≥ threshold",
            "text": self.text,
            "examples": self.examples,
            "overlaps": [
                {"evaluation_id": qid, "train_id": tid, "kind": kind, "similarity": round(similarity, 4)}
                for qid, (tid, kind, similarity) in self.overlaps.items()
            ],
            "error": self.error,
        }


def _cache_name(train: QuestionFile, evaluation: QuestionFile) -> str:
    return f"leakage/v{SCHEMA}/{train.sha256}/{evaluation.sha256}.json"


def leakage_compute(train: QuestionFile, evaluation: QuestionFile) -> dict[str, Any]:
    """Check the pair now and keep the report in the data storage (once: a report already there is read)."""
    from .services import data_storage

    storage, name = data_storage(), _cache_name(train, evaluation)
    if storage.exists(name):
        with storage.open(name, "rb") as handle:
            stored: dict[str, Any] = json.load(handle)
            return stored
    train_rows, eval_rows = _questions(train), _questions(evaluation)
    found = find_overlap([q for _, q in train_rows], [q for _, q in eval_rows])
    report = {
        "schema": SCHEMA,
        "threshold": NEAR_DUPLICATE_THRESHOLD,
        "questions": len(eval_rows),
        "train_questions": len(train_rows),
        "overlaps": [
            [eval_rows[o.evaluation_index][0], train_rows[o.train_index][0], o.kind, o.similarity] for o in found
        ],
        "examples": [
            {
                "evaluation_id": eval_rows[o.evaluation_index][0],
                "evaluation_question": eval_rows[o.evaluation_index][1],
                "train_id": train_rows[o.train_index][0],
                "train_question": train_rows[o.train_index][1],
                "kind": o.kind,
                "similarity": round(o.similarity, 4),
            }
            for o in _examples(found)
        ],
    }
    if not storage.exists(name):
        storage.save(name, ContentFile(json.dumps(report, ensure_ascii=False).encode()))
    return report


def _examples(found: list[Any]) -> list[Any]:
    """A few of the overlaps to show: the exact ones first, then the near ones, each in evaluation order."""
    exact = [o for o in found if o.kind == "exact"]
    near = [o for o in found if o.kind == "near"]
    return (exact[: EXAMPLES - min(len(near), EXAMPLES // 2)] + near)[:EXAMPLES]


def _from_report(train: QuestionFile, evaluation: QuestionFile, report: Mapping[str, Any]) -> Leakage:
    overlaps = {str(e): (str(t), str(k), float(s)) for e, t, k, s in report["overlaps"]}
    return Leakage(
        train.label,
        evaluation.label,
        "done",
        questions=int(report["questions"]),
        train_questions=int(report["train_questions"]),
        threshold=float(report["threshold"]),
        overlaps=overlaps,
        examples=list(report["examples"]),
    )


def leakage_report(train: QuestionFile, evaluation: QuestionFile) -> Leakage:
    """The pair's report: read when kept, checked now when small, else asked of a worker (status `checking`)."""
    from .services import data_storage

    storage, name = data_storage(), _cache_name(train, evaluation)
    try:
        if storage.exists(name) or train.records + evaluation.records <= SYNC_QUESTIONS:
            return _from_report(train, evaluation, leakage_compute(train, evaluation))
    except (OSError, ValueError, KeyError) as error:  # a file missing from the storage, or damaged there
        log.warning("leakage %s × %s: %r", train.label, evaluation.label, error)
        return Leakage(train.label, evaluation.label, "failed", error="a file cannot be read from the data storage")
    _ask_worker(train, evaluation, name)
    return Leakage(train.label, evaluation.label, "checking", questions=evaluation.records)


def _ask_worker(train: QuestionFile, evaluation: QuestionFile, name: str) -> None:
    """Send the task unless it was sent less than PENDING_S ago (a marker beside the report says when)."""
    from webapp.runs.tasks import send

    from .services import data_storage

    storage, marker = data_storage(), f"{name}.pending"
    try:
        if storage.exists(marker) and time.time() - storage.get_modified_time(marker).timestamp() < PENDING_S:
            return
        if storage.exists(marker):
            storage.delete(marker)
        storage.save(marker, ContentFile(b""))
        send(LEAKAGE_TASK, [train.spec, evaluation.spec], "cpu")
    except Exception:
        log.exception("could not ask for the leakage check of %s × %s", train.label, evaluation.label)


def leakage_execute(*, train_spec: str, evaluation_spec: str) -> str:
    """The task's work: check the pair and keep the report."""
    try:
        train, evaluation = file_from_spec(train_spec), file_from_spec(evaluation_spec)
    except DatasetVersion.DoesNotExist:
        return "gone"
    report = leakage_compute(train, evaluation)
    return f"{len(report['overlaps'])} of {report['questions']}"


# -- what the pages ask -------------------------------------------------------------------------------------------


def _newest(dataset: Dataset) -> dict[str, DatasetVersion]:
    newest: dict[str, DatasetVersion] = {}
    for version in dataset.versions.select_related("dataset").order_by("number"):
        newest[version.split] = version
    return newest


def dataset_leakage(*, dataset: Dataset, others: Iterable[Dataset], limit: int = 12) -> list[Leakage]:
    """A questions dataset's overlaps, each split as of its newest version: its training split against each of its
    own other splits, then each other questions dataset the viewer can name (`others`: their training split against
    this one's evaluation splits, and this one's training split against theirs), at most `limit` pairs."""
    if dataset.kind != Dataset.Kind.QUESTIONS:
        return []
    mine = _newest(dataset)
    pairs: list[tuple[DatasetVersion, DatasetVersion]] = []
    train = mine.get(TRAIN_SPLIT)
    if train is not None:
        pairs += [(train, v) for split, v in sorted(mine.items()) if split != TRAIN_SPLIT]
    for other in others:
        if other.pk == dataset.pk or other.kind != Dataset.Kind.QUESTIONS:
            continue
        theirs = _newest(other)
        if TRAIN_SPLIT in theirs:
            pairs += [(theirs[TRAIN_SPLIT], v) for split, v in sorted(mine.items()) if split != TRAIN_SPLIT]
        if train is not None:
            pairs += [(train, v) for split, v in sorted(theirs.items()) if split != TRAIN_SPLIT]
    unique = list(dict.fromkeys((t.pk, e.pk) for t, e in pairs if t.sha256 != e.sha256))
    by_id = {v.pk: v for pair in pairs for v in pair}
    return [leakage_report(version_file(by_id[t]), version_file(by_id[e])) for t, e in unique[:limit]]


@dataclass(frozen=True)
class BenchmarkLeakage:
    """One benchmark of a run: its name as the run's evaluations store it, and its report (None, with `note`, when
    either side is not a question file the platform holds: a path, a remote set)."""

    benchmark: str
    report: Leakage | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "note": self.note, **(self.report.to_dict() if self.report else {})}


def config_train_file(config: Mapping[str, Any], *, team: Team) -> QuestionFile | None:
    """The training split a stored config names (`env.dataset`): a pinned dataset's `train` file or the built-in's."""
    dataset = (config.get("env") or {}).get("dataset")
    if dataset == BUILTIN:
        return builtin_file(TRAIN_SPLIT)
    if is_reference(dataset):
        try:
            snapshot = data_snapshot(dataset, team=team, field="env.dataset", kind="questions")
        except InvalidInput:
            return None
        version = snapshot.files.get(TRAIN_SPLIT)
        return version_file(version) if version is not None else None
    return None


def benchmark_file(name: str, split: str, *, team: Team) -> QuestionFile | None:
    """The evaluation split a benchmark name means: a pinned dataset's `split` file or the built-in's."""
    if name == BUILTIN:
        return builtin_file(split) if _builtin_digest(split)[1] else None
    if is_reference(name):
        try:
            snapshot = data_snapshot(name, team=team, field="eval.benchmarks", kind="questions")
        except InvalidInput:
            return None
        version = snapshot.files.get(split)
        return version_file(version) if version is not None else None
    return None


def config_leakage(
    config: Mapping[str, Any], *, team: Team, benchmarks: list[str] | None = None
) -> list[BenchmarkLeakage]:
    """Per benchmark of a stored config (or `benchmarks`, named as the config names them), what it shares with the
    config's training split."""
    evaluation = config.get("eval") or {}
    split = str(evaluation.get("split") or EvalConfig.split)
    names = benchmarks if benchmarks is not None else [str(b) for b in evaluation.get("benchmarks") or []]
    train = config_train_file(config, team=team)
    rows = []
    for name in names:
        if train is None:
            rows.append(BenchmarkLeakage(name, None, "not checked: the training data is not a questions file here"))
            continue
        bench = benchmark_file(name, split, team=team)
        if bench is None:
            rows.append(BenchmarkLeakage(name, None, f"not checked: no {split} split held here"))
        else:
            rows.append(BenchmarkLeakage(name, leakage_report(train, bench)))
    return rows


def excluded_questions(rows: Iterable[BenchmarkLeakage]) -> dict[str, frozenset[str]]:
    """benchmark → the ids of its questions also in training (only benchmarks checked and found to overlap)."""
    return {row.benchmark: row.report.question_ids for row in rows if row.report is not None and row.report.leaked}
