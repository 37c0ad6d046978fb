"""`data:<name>[@<version>]` in a config: resolved against the team's datasets (then the shared ones; `data:shared/
<name>` names a shared one explicitly), checked for the kind and split the field needs, and pinned to the exact
version, so a run stays reproducible after a re-upload. On a worker, pinned references become local files: each
version's canonical JSONL fetched from the data storage into the cache by sha256 (the hash checked), a questions
dataset as a directory of `<split>.jsonl`."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from django.db.models import Case, Q, Value, When

from inspo_engine.config import EnvConfig, EvalConfig, RunConfig
from webapp.accounts.models import Team
from webapp.core.errors import InvalidInput

from .models import Dataset, DatasetVersion

PREFIX = "data:"
SHARED = "shared/"
REFERENCE = re.compile(r"data:(shared/)?([A-Za-z0-9][A-Za-z0-9_.-]{0,63})(?:@([1-9][0-9]{0,8}))?")
OWN_FIRST = Case(When(team__isnull=True, then=Value(1)), default=Value(0))
"""Orders a team's own datasets before the shared ones on any database: ordering by the team's id would not, as
SQLite sorts NULL (shared) first and PostgreSQL last."""
QUESTION_FIELDS = ("env.dataset",)
CORPUS_FIELDS = ("env.corpus",)


def is_reference(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(PREFIX)


@dataclass(frozen=True)
class Snapshot:
    """Version `number` of a dataset: each split's newest file among versions 1 … number."""

    dataset: Dataset
    number: int
    files: dict[str, DatasetVersion]

    @property
    def reference(self) -> str:
        return f"{PREFIX}{SHARED if self.dataset.shared else ''}{self.dataset.name}@{self.number}"

    @property
    def versions(self) -> list[DatasetVersion]:
        return list(self.files.values())


def data_names(team: Team) -> list[str]:
    """What a config may name: the team's datasets, then the shared ones (as `data:shared/<name>` when the team
    has one of the same name)."""
    own = list(Dataset.objects.filter(team=team).values_list("name", flat=True))
    shared = Dataset.objects.filter(team__isnull=True).values_list("name", flat=True)
    return [f"{PREFIX}{n}" for n in own] + [f"{PREFIX}{SHARED if n in own else ''}{n}" for n in shared]


def data_offered(teams: Any, kind: str, *, split: str | None = None) -> dict[str, Dataset]:
    """The datasets a form offers for `kind`, by the reference it names each with: the given teams' datasets, then
    the shared ones; with `split`, only those that have a file of that split (a run trains on `train`)."""
    datasets = Dataset.objects.filter(Q(team__in=teams) | Q(team__isnull=True), kind=kind).order_by(OWN_FIRST, "name")
    versions = DatasetVersion.objects.filter(dataset__in=datasets)
    having = set((versions.filter(split=split) if split else versions).values_list("dataset_id", flat=True))
    found = [d for d in datasets if d.pk in having]
    own = {d.name for d in found if not d.shared}
    offered: dict[str, Dataset] = {}
    for d in found:
        offered.setdefault(f"{PREFIX}{SHARED if d.shared and d.name in own else ''}{d.name}", d)
    return offered


def data_choices(teams: Any, kind: str, *, split: str | None = None) -> list[str]:
    """The references a form offers for `kind` (`data_offered`)."""
    return list(data_offered(teams, kind, split=split))


def data_snapshot(value: str, *, team: Team, field: str, kind: str, split: str | None = None) -> Snapshot:
    """The snapshot `value` names, of `kind`, holding `split`; InvalidInput naming `field` (and what exists)."""
    match = REFERENCE.fullmatch(value)
    if match is None:
        raise InvalidInput({field: [f"{value!r}: name data as data:<name> or data:<name>@<version>"]})
    shared, name, number = match.group(1), match.group(2), match.group(3)
    owner = Q(team__isnull=True) if shared else Q(team=team) | Q(team__isnull=True)
    dataset = Dataset.objects.filter(owner, name=name).order_by(OWN_FIRST).first()
    if dataset is None:
        names = ", ".join(data_names(team)) or "none yet (upload one on the Data page)"
        raise InvalidInput({field: [f"{value!r}: no dataset of that name; your team can name {names}"]})
    if dataset.kind != kind:
        raise InvalidInput({field: [f"{value!r} is a {dataset.kind} dataset; this field needs {kind}"]})
    versions = list(dataset.versions.order_by("number"))
    first, last = (versions[0].number, versions[-1].number) if versions else (1, 0)
    wanted = int(number) if number else last
    if not first <= wanted <= last:
        deleted = f" (those before {first} were deleted)" if first > 1 else ""
        raise InvalidInput({field: [f"{value!r}: data:{name} has versions {first} to {last}{deleted}"]})
    files = {v.split: v for v in versions if v.number <= wanted}
    if split is not None and split not in files:
        found = ", ".join(sorted(files)) or "none"
        raise InvalidInput({field: [f"{value!r} has no {split!r} split at version {wanted} (it has: {found})"]})
    return Snapshot(dataset, wanted, files)


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = data.get(name)
    return section if isinstance(section, Mapping) else {}


def _references(data: Mapping[str, Any]) -> Iterator[tuple[str, str, str, str | None, int | None]]:
    """(field, value, kind, split it needs, index in eval.benchmarks) of every data reference in a config as data
    (`RunConfig.to_dict()`, or one not built yet: a field left out takes its default, and a value of the wrong type
    is no reference; the engine refuses it)."""
    env, evaluation = _section(data, "env"), _section(data, "eval")
    retriever = env.get("retriever", EnvConfig.retriever)
    if is_reference(env.get("dataset")):
        yield "env.dataset", env["dataset"], "questions", "train", None
    if is_reference(env.get("corpus")) and retriever != "remote":
        yield "env.corpus", env["corpus"], "corpus", None, None
    split = evaluation.get("split", EvalConfig.split)
    benchmarks = evaluation.get("benchmarks")
    for index, name in enumerate(benchmarks if isinstance(benchmarks, list) else []):
        if is_reference(name):
            yield "eval.benchmarks", name, "questions", split if isinstance(split, str) else None, index


def data_pin(data: Mapping[str, Any], *, team: Team) -> tuple[dict[str, Any], list[DatasetVersion]]:
    """A config as data with every data reference pinned to its version, and the versions it uses; InvalidInput
    under `config` naming each field whose reference is unknown, of the wrong kind, or lacks the split it needs."""
    errors: dict[str, list[str]] = {}
    pinned: dict[tuple[str, int | None], str] = {}
    versions: list[DatasetVersion] = []
    for field, value, kind, split, index in _references(data):
        try:
            snapshot = data_snapshot(value, team=team, field=field, kind=kind, split=split)
        except InvalidInput as error:
            for key, messages in error.errors.items():
                errors.setdefault(key, []).extend(messages)
            continue
        pinned[(field, index)] = snapshot.reference
        versions += [v for v in snapshot.versions if split is None or v.split == split]
    if errors:
        raise InvalidInput(errors, key="config")
    return _data_with_values(data, pinned), versions


def _data_with_values(data: Mapping[str, Any], values: dict[tuple[str, int | None], str]) -> dict[str, Any]:
    """A copy of the config as data with these values at their (field, index in eval.benchmarks)."""
    changed = dict(data)
    for (field, index), value in values.items():
        name, leaf = field.split(".")
        section = changed[name] = dict(changed[name])
        if index is None:
            section[leaf] = value
        else:
            section[leaf] = list(section[leaf])
            section[leaf][index] = value
    return changed


def _with_values(config: RunConfig, values: dict[tuple[str, int | None], str]) -> RunConfig:
    env, evaluation = config.env, config.eval
    if ("env.dataset", None) in values:
        env = dataclasses.replace(env, dataset=values[("env.dataset", None)])
    if ("env.corpus", None) in values:
        env = dataclasses.replace(env, corpus=values[("env.corpus", None)])
    benchmarks = [values.get(("eval.benchmarks", i), name) for i, name in enumerate(evaluation.benchmarks)]
    return dataclasses.replace(config, env=env, eval=dataclasses.replace(evaluation, benchmarks=benchmarks))


def data_default_benchmarks(data: Mapping[str, Any], *, team: Team) -> dict[str, Any]:
    """A run that trains on a dataset with the evaluation's split (`test`) is evaluated on it too, first, unless it
    already is: for a submission (a config as data, not yet built) that chose no benchmarks of its own."""
    env, evaluation = _section(data, "env"), _section(data, "eval")
    dataset, split = env.get("dataset"), evaluation.get("split", EvalConfig.split)
    benchmarks = evaluation.get("benchmarks", EvalConfig().benchmarks)
    if not is_reference(dataset) or not isinstance(split, str) or not isinstance(benchmarks, list):
        return dict(data)  # the engine names what is wrong
    try:
        snapshot = data_snapshot(dataset, team=team, field="env.dataset", kind="questions", split=split)
    except InvalidInput:
        return dict(data)  # no such split (or no such data: admission says so)
    if dataset in benchmarks or snapshot.reference in benchmarks:
        return dict(data)
    return {**data, "eval": {**evaluation, "benchmarks": [dataset, *benchmarks]}}


# -- on a worker -------------------------------------------------------------------------------------------------


class DataUnavailable(RuntimeError):
    """A version's file is missing from the storage or does not hash to its sha256."""


def data_materialize(config: RunConfig, *, team: Team, cache_dir: Path) -> tuple[RunConfig, dict[str, str]]:
    """The config with each (pinned) reference replaced by a local path under `cache_dir/data/`, and the map from
    those paths back to the references (what evaluations are named by)."""
    values: dict[tuple[str, int | None], str] = {}
    names: dict[str, str] = {}
    for field, value, kind, _, index in _references(config.to_dict()):
        snapshot = data_snapshot(value, team=team, field=field, kind=kind)
        path = str(_local(snapshot, cache_dir))
        values[(field, index)], names[path] = path, snapshot.reference
    return _with_values(config, values), names


def _local(snapshot: Snapshot, cache_dir: Path) -> Path:
    """A corpus: its file. Questions: a directory of `<split>.jsonl` links to the files (made once)."""
    if snapshot.dataset.kind == "corpus":
        return version_file(snapshot.files["corpus"], cache_dir)
    directory = cache_dir / "data" / "snapshots" / f"{snapshot.dataset.pk}@{snapshot.number}"
    if not directory.is_dir():
        staging = Path(tempfile.mkdtemp(dir=_made(directory.parent), prefix=".staging-"))
        for split, version in snapshot.files.items():
            os.link(version_file(version, cache_dir), staging / f"{split}.jsonl")
        try:
            os.replace(staging, directory)
        except OSError:  # another worker made it first
            for item in staging.iterdir():
                item.unlink()
            staging.rmdir()
    return directory


def version_file(version: DatasetVersion, cache_dir: Path) -> Path:
    """The version's canonical JSONL in the local cache, fetched from the data storage once, its sha256 checked."""
    from .services import data_storage

    target = _made(cache_dir / "data" / "blobs") / f"{version.sha256}.jsonl"
    if target.is_file():
        return target
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".fetch-", delete=False) as handle:
        try:
            with data_storage().open(version.file, "rb") as source:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    digest.update(chunk)
                    handle.write(chunk)
        except OSError as error:
            os.unlink(handle.name)
            raise DataUnavailable(f"data:{version.dataset.name} v{version.number}: its file cannot be read") from error
    if digest.hexdigest() != version.sha256:
        os.unlink(handle.name)
        raise DataUnavailable(f"data:{version.dataset.name} v{version.number}: its file does not match its sha256")
    os.replace(handle.name, target)
    return target


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def display_names(names: dict[str, str], value: Any) -> Any:
    """`value` (a benchmark's name or path) as the reference it was materialised from, when it was one."""
    return names.get(str(value), value)


def data_local_benchmarks(benchmarks: list[str], *, team: Team, cache_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Benchmark names with each (pinned) data reference as its local directory, and the map back."""
    local, names = [], {}
    for name in benchmarks:
        if is_reference(name):
            snapshot = data_snapshot(name, team=team, field="benchmarks", kind="questions")
            path = str(_local(snapshot, cache_dir))
            local.append(path)
            names[path] = snapshot.reference
        else:
            local.append(name)
    return local, names
