"""Engine configs from what a user sends: a preset, a partial config, overrides. The engine validates them; this
module merges the inputs, adds the platform's rules (file paths confined to the team's data, what a run may reach)
and turns errors into field errors."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from inspo_engine.config import RunConfig, TrackingConfig, resolve_key
from inspo_engine.config_fields import ConfigError, FieldError
from inspo_engine.models import SMOLLM2
from inspo_engine.presets import PRESETS
from inspo_engine.schedule import phases_for
from webapp.accounts.models import Team
from webapp.core.errors import InvalidInput
from webapp.data.models import DatasetVersion
from webapp.data.references import data_default_benchmarks, data_pin, data_snapshot, is_reference

from .endpoints import config_access_check

PRESET_NAMES = tuple(PRESETS)
MAX_SEED = 2**63 - 1
"""The largest seed the database stores (a signed 64-bit column)."""


def config_errors(error: ConfigError) -> InvalidInput:
    """The engine's errors keyed by dotted field path, under `config`."""
    errors: dict[str, list[str]] = {}
    for item in error.errors:
        errors.setdefault(item.field or "config", []).append(item.message)
    return InvalidInput(errors, key="config")


def preset_dict(name: str) -> dict[str, Any]:
    _preset_check(name)
    return copy.deepcopy(PRESETS[name]())


def _preset_check(name: str) -> None:
    if name not in PRESETS:
        raise InvalidInput({"preset": [f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}"]})


@dataclasses.dataclass(frozen=True)
class Admission:
    """A config admitted as a run of a team: rewritten by the platform (data pinned, paths confined, the team's
    default trackers, the optimizer endpoint named), then built and validated by the engine once; and the data
    versions it names, which the run records."""

    config: RunConfig
    versions: list[DatasetVersion]


def config_data(
    *,
    preset: str | None = None,
    base: RunConfig | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """preset ⊕ base ⊕ overrides, merged as data and not validated yet. `base` is a partial config merged over the
    preset section by section, or a whole RunConfig (the preset then adds nothing: it is only checked);
    `overrides` name fields by dotted path (`grpo.lr`), the paper's name or a unique leaf name. InvalidInput under
    `preset`, or under `config` naming each override key that is no field."""
    if isinstance(base, RunConfig):
        if preset:
            _preset_check(preset)
        data = base.to_dict()
    else:
        data = preset_dict(preset) if preset else {}
        _merge(data, dict(base or {}))
    try:
        _set_fields(data, overrides or {})
    except ConfigError as error:
        raise config_errors(error) from error
    return data


def config_compose(
    *,
    preset: str | None = None,
    base: RunConfig | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RunConfig:
    """`config_data` built and validated by the engine, without any team's rules: what a preset is (the presets
    API, the run form's defaults, a run's changes from its preset). A config that becomes a run is admitted by
    `config_admit` instead. InvalidInput under `preset`, or under `config` keyed by field path."""
    data = config_data(preset=preset, base=base, overrides=overrides)
    try:
        return RunConfig.from_dict(data)
    except ConfigError as error:
        raise config_errors(error) from error


def _set_fields(data: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Each override written into `data` at its field's path; ConfigError names every key that is no field."""
    errors: list[FieldError] = []
    for key, value in overrides.items():
        try:
            *parents, leaf = resolve_key(key).split(".")
        except ConfigError as error:
            errors += error.errors
            continue
        target = data
        for depth, part in enumerate(parents, start=1):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                errors.append(FieldError(".".join(parents[:depth]), "must be an object of fields"))
                break
        else:
            target[leaf] = copy.deepcopy(value)
    if errors:
        raise ConfigError(errors)


def config_total_steps(config: RunConfig) -> int:
    """The run's steps over every phase its mode runs (the engine's `phases_for`): pre and post add the
    instruction-only phase to the training steps."""
    return sum(phase.steps for phase in phases_for(config))


def config_admit(
    *,
    team: Team,
    preset: str | None = None,
    base: RunConfig | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    team_tracking: bool = False,
    default_benchmarks: bool = False,
    existing: bool = True,
    reserved: Mapping[str, int] | None = None,
) -> Admission:
    """The one admission of a config that becomes a run of `team`: a submission, a clone, an experiment's run, an
    import. Composed as data (`config_data`); with `team_tracking` (a submission that chose no trackers, see
    `tracking_named`) the team's default tracking section in place of the run's, if the team has one; with
    `default_benchmarks` (one that chose no benchmarks, see `benchmarks_named`) its training data's test split
    evaluated too; then data pinned, file paths confined to the team's data and, with `existing` (a submission: its
    run will read them; an import's run read them long ago), there, and the whole built and validated by the engine,
    once (`config_confine`); last, what the run may reach (see `endpoints`; `reserved`: optimizer calls per endpoint
    of runs admitted with this one and not stored yet, an experiment's).

    InvalidInput under `preset`, or under `config` naming each field; an error in a field the team's default set
    says so."""
    data = config_data(preset=preset, base=base, overrides=overrides)
    default = team_tracking_default(team) if team_tracking else {}
    if default:
        data["tracking"] = copy.deepcopy(default)
    if default_benchmarks:
        data = data_default_benchmarks(data, team=team)
    try:
        admitted = config_confine(data, team=team, existing=existing)
        return dataclasses.replace(admitted, config=config_access_check(admitted.config, team=team, reserved=reserved))
    except InvalidInput as error:
        if default:
            raise _blamed_on_team_default(error) from error
        raise


# -- the team's default trackers ----------------------------------------------------------------------------------

TEAM_DEFAULT_NOTE = "(from the team's default trackers: change them, or set tracking in the run to choose its own)"


def tracking_named(*, config: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None) -> bool:
    """Whether a submission chooses its own trackers: a partial config with a `tracking` section (even an empty one
    or `{"backends": []}`), or an override of any tracking field. Such a run keeps what it chose; any other gets its
    team's default (`config_admit(team_tracking=True)`)."""
    if config is not None and "tracking" in config:
        return True
    return any(_names_tracking(str(key)) for key in overrides or {})


def benchmarks_named(*, config: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None) -> bool:
    """Whether a submission chooses its own benchmarks (`eval.benchmarks` in its partial config or overrides); one
    that does not is also evaluated on its training data's test split (`data_default_benchmarks`)."""
    section = (config or {}).get("eval")
    if isinstance(section, Mapping) and "benchmarks" in section:
        return True
    return any(_resolves_to(str(key), "eval.benchmarks") for key in overrides or {})


def _resolves_to(key: str, path: str) -> bool:
    try:
        return resolve_key(key) == path
    except ConfigError:
        return False


def _names_tracking(key: str) -> bool:
    try:
        return resolve_key(key).startswith("tracking.")
    except ConfigError:
        return False  # composing the config reports the unknown key


def team_tracking_default(team: Team) -> dict[str, Any]:
    """The team's default tracking section as stored now (read again: an owner may just have changed it); {} for
    none."""
    stored = Team.objects.filter(pk=team.pk).values_list("tracking_default", flat=True).first()
    return dict(stored or {})


def tracking_section(data: Mapping[str, Any]) -> TrackingConfig:
    """A tracking section built and checked by the engine as a run's would be (unknown fields, types, names,
    the URL's scheme); InvalidInput keyed by `tracking.<field>` otherwise."""
    try:
        return RunConfig.from_dict({"tracking": dict(data)}).tracking
    except ConfigError as error:
        errors: dict[str, list[str]] = {}
        for item in error.errors:
            errors.setdefault(item.field or "tracking", []).append(item.message)
        raise InvalidInput(errors) from error


def _blamed_on_team_default(error: InvalidInput) -> InvalidInput:
    """`error` saying in each of its tracking errors that the field came from the team's default, not the run."""
    errors = {
        field: [f"{message} {TEAM_DEFAULT_NOTE}" for message in messages] if field.startswith("tracking.") else messages
        for field, messages in error.errors.items()
    }
    return InvalidInput(errors, key=error.key)


# Config fields that may name files on the workers' disks, with the names that are not files.
PATH_FIELDS: dict[str, frozenset[str]] = {
    "env.dataset": frozenset({"builtin"}),
    "env.corpus": frozenset({"builtin"}),
    "backend.model": frozenset({SMOLLM2}),
    "optimizer.local_model_path": frozenset({SMOLLM2}),
}
MODEL_FIELDS = ("backend.model", "optimizer.local_model_path")
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def team_data_dir(team: Team) -> Path:
    """The team's own data directory: its datasets, corpora and models; relative paths in its configs start here."""
    return Path(settings.INSPO_DATA_DIR) / "teams" / str(team.pk)


def confine_path(
    field: str,
    value: str,
    *,
    team: Team,
    known: frozenset[str] = frozenset({"builtin"}),
    existing: bool = False,
) -> str:
    """`value` when it is a known name (or, for a model, a hub id that is no path here), else the resolved path
    (`~` expanded, relative to the team's data directory, symlinks followed), which must lie inside the team's
    data directory or the shared one, and with `existing` be there. InvalidInput naming `field` otherwise; its
    messages name no directory of the server, only paths inside the team's (or the shared) data directory."""
    root = team_data_dir(team)
    if value in known:
        return value
    if field in MODEL_FIELDS and HUB_ID.fullmatch(value) and not _exists(root / value):
        if not _exists(Path(value)):
            return value
        message = f"{value!r} reads as a hub id but is also a path here; give its path in your team's data directory"
        raise InvalidInput({field: [message]})
    path = Path(value).expanduser()
    resolved = (path if path.is_absolute() else root / path).resolve()
    roots = {TEAM_DATA: root.resolve(), SHARED_DATA: Path(settings.INSPO_SHARED_DATA_DIR).resolve()}
    where = next((name for name, allowed in roots.items() if resolved.is_relative_to(allowed)), None)
    if where is None:
        message = f"{value!r}: file paths must lie in your team's data directory or in the shared data directory"
        raise InvalidInput({field: [message]})
    if existing and not _exists(resolved):
        inside = resolved.relative_to(roots[where]).as_posix()
        raise InvalidInput({field: [f"{inside!r} does not exist in {where}; {_MISSING_HINTS.get(field, _DATA_HINT)}"]})
    return str(resolved)


TEAM_DATA = "your team's data directory"
SHARED_DATA = "the shared data directory"
_DATA_HINT = "name 'builtin', data uploaded on the Data page (data:<name>), or a file that is there"
_MISSING_HINTS = {field: "name a hub id (owner/name) or a model directory that is there" for field in MODEL_FIELDS}


def _exists(path: Path) -> bool:
    """Whether `path` exists; a name too long for the filesystem does not."""
    try:
        return path.exists()
    except OSError:
        return False


def config_confine(data: Mapping[str, Any], *, team: Team, existing: bool = False) -> Admission:
    """A config as data (a submission composed by `config_admit`, or a run's stored config on its worker) with every
    data reference pinned to its version (`data:<name>@<n>`, see `webapp.data`) and every path-like field resolved
    and confined to the team's data (see `confine_path`), then built and validated by the engine: once, after the
    rewriting (a resolved path may break a bound that the name it replaces kept), with the seed bound of the
    database. InvalidInput under `config` naming each field the engine refuses, that names unknown data or points
    elsewhere, or with `existing` (a submission) a file that is not there. A remote retriever reads no corpus, so
    its `env.corpus` need not exist."""
    errors: dict[str, list[str]] = {}
    versions: list[DatasetVersion] = []
    try:
        data, versions = data_pin(data, team=team)
    except InvalidInput as error:
        _add_errors(errors, error.errors)
    data = _paths_confined(data, team=team, existing=existing, errors=errors)
    try:
        config = RunConfig.from_dict(data)
    except ConfigError as error:
        _add_errors(errors, config_errors(error).errors)
    else:
        if config.seed > MAX_SEED:
            errors.setdefault("seed", []).append(f"must be ≤ {MAX_SEED}")
    if errors:
        raise InvalidInput(errors, key="config")
    return Admission(config, versions)


def _add_errors(errors: dict[str, list[str]], more: Mapping[str, list[str]]) -> None:
    for field, messages in more.items():
        known = errors.setdefault(field, [])
        known += [message for message in messages if message not in known]


def _paths_confined(
    data: Mapping[str, Any], *, team: Team, existing: bool, errors: dict[str, list[str]]
) -> dict[str, Any]:
    """A copy of the config as data with each path-like field confined (`confine_path`); the errors added to
    `errors`. A field left out keeps its default (a name, no path) and a value of the wrong type is the engine's to
    refuse."""
    remote = _section(data, "env").get("retriever") == "remote"
    confined: dict[str, Any] = {}
    for field, known in PATH_FIELDS.items():
        name, leaf = field.split(".")
        value = _section(data, name).get(leaf)
        if field in MODEL_FIELDS and is_reference(value):  # no path, no hub id: left as it was, it would be neither
            message = f"{value!r}: this field takes a model (a hub id, or its directory in your team's data), not data"
            _add_errors(errors, {field: [message]})
        elif isinstance(value, str) and value and not is_reference(value):
            read = existing and not (field == "env.corpus" and remote)
            try:
                confined[field] = confine_path(field, value, team=team, known=known, existing=read)
            except InvalidInput as error:
                _add_errors(errors, error.errors)
    benchmarks = _section(data, "eval").get("benchmarks")
    if isinstance(benchmarks, list) and all(isinstance(name, str) for name in benchmarks):
        try:
            confined["eval.benchmarks"] = benchmark_paths(
                benchmarks, team=team, field="eval.benchmarks", existing=existing
            )
        except InvalidInput as error:
            _add_errors(errors, error.errors)
    changed = dict(data)
    for path, value in confined.items():
        name, leaf = path.split(".")
        changed[name] = {**changed[name], leaf: value}
    return changed


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = data.get(name)
    return section if isinstance(section, Mapping) else {}


def benchmark_paths(names: list[str], *, team: Team, field: str = "benchmarks", existing: bool = True) -> list[str]:
    """Benchmark names: 'builtin', data references (pinned; see `webapp.data`), or files confined like any other
    path and, with `existing` (an evaluation about to read them), there."""
    confined, errors = [], []
    for name in names:
        try:
            if is_reference(name):
                confined.append(data_snapshot(name, team=team, field=field, kind="questions").reference)
                continue
            confined.append(confine_path(field, name, team=team, existing=existing))
        except InvalidInput as error:
            errors += error.errors[field]
    if errors:
        raise InvalidInput({field: errors})
    return confined


def _merge(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
