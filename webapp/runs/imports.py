"""Loads a run directory written by the engine's command line (`python -m inspo_engine train --out DIR`) into a
team as a run like any other: its config, its events replayed through the run recorder, its checkpoints
under the run's own directory. It knows the command line's file layout; it trains and enqueues nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import DatabaseError, transaction

from inspo_engine import events as ev
from inspo_engine.checkpoints import CHECKPOINT_NAME, CHECKPOINTS_DIR
from inspo_engine.config import RunConfig
from inspo_engine.config_fields import ConfigError
from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import require_role
from webapp.core.errors import InvalidInput, ServiceError
from webapp.runs.recorder import DatabaseSink

from .configs import config_admit, config_total_steps
from .lifecycle import checkpoints_refresh, run_discard_after
from .models import Run
from .selectors import run_directory

CONFIG_FILE = "config.json"
EVENTS_FILE = "events.jsonl"
BEST_FILE = "best_instruction.txt"
NO_END_EVENT = "imported without an end event"
ENDS = {"finished": Run.Status.FINISHED, "cancelled": Run.Status.CANCELLED}


class ImportRefused(ServiceError, ValueError):
    """The directory is not a run directory the web app can load; nothing was written."""


Line = tuple[int, ev.Event]
"""An event and its line number in events.jsonl."""


@dataclass(frozen=True)
class RunSource:
    """A checked run directory: what to store, and every file to copy with the real path it is read from."""

    directory: Path
    config: RunConfig
    attempts: list[list[Line]]
    status: str
    error: str
    started: datetime
    ended: datetime | None
    files: list[tuple[Path, Path]]
    """(path under the run's directory, real path under `directory`)."""


def run_import(*, team: Team, user: User, directory: Path, name: str | None = None) -> Run:
    """Store the run in `directory` as a run of `team` created by `user`, with its status from how it ended, every
    event, and its checkpoints copied (hard-linked where the filesystem allows) under `run_directory`. One
    transaction: a refused directory (ImportRefused) or a failure leaves no row and no file behind."""
    require_role(user, team, Role.MEMBER)
    source = run_source_read(Path(directory), team=team)
    run_name = (Path(os.path.abspath(directory)).name if name is None else name).strip()
    if not run_name:
        raise ImportRefused("give the run a name")
    run_id = uuid.uuid4()
    target = run_directory(run_id=run_id)
    try:
        _copy_files(source, target)
        with transaction.atomic():
            run = _run_create(source, run_id=run_id, team=team, user=user, name=run_name)
            _replay(run, source, target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    run.refresh_from_db()
    return run


def run_source_read(directory: Path, *, team: Team) -> RunSource:
    """Check a run directory without writing anything: config.json must be a valid engine config that `team` could
    submit (its paths in the team's data, its URLs and optimizer endpoint allowed: `configs.config_admit`) and
    events.jsonl engine events; links must stay inside the directory. ImportRefused says what is wrong."""
    if not directory.is_dir():
        raise ImportRefused(f"{directory} is not a directory")
    root = directory.resolve()
    config = _config_read(root, directory, team)
    events_path = root / EVENTS_FILE
    if not events_path.exists():
        raise ImportRefused(f"{directory} has no {EVENTS_FILE}: not a run directory of `python -m inspo_engine train`")
    lines = _events_read(_inside(root, events_path))
    if not lines:
        raise ImportRefused(f"{directory / EVENTS_FILE} holds no events")
    attempts = _attempts(lines)
    status, error, ended = _outcome(attempts[-1])
    files = [(Path(name), _inside(root, root / name)) for name in (CONFIG_FILE, EVENTS_FILE, BEST_FILE)]
    files = [(name, real) for name, real in files if real.is_file()]
    for name in _checkpoint_names(attempts):
        files += _checkpoint_files(root, name)
    started = datetime.fromtimestamp(attempts[0][0][1].time, tz=UTC)
    return RunSource(root, config, attempts, status, error, started, ended, files)


# -- reading the directory --------------------------------------------------------------------------------------


def _inside(root: Path, path: Path) -> Path:
    """The real path of `path`, which must stay inside `root` (a link leading out is refused)."""
    real = path.resolve()
    if not real.is_relative_to(root):
        raise ImportRefused(f"{path.relative_to(root)} is a link that leads outside {root}; not imported")
    return real


def _config_read(root: Path, directory: Path, team: Team) -> RunConfig:
    """The config as a submission by `team` would store it (paths resolved, the optimizer endpoint named)."""
    path = root / CONFIG_FILE
    if not path.exists():
        raise ImportRefused(f"{directory} has no {CONFIG_FILE}: not a run directory of `python -m inspo_engine train`")
    try:
        config = RunConfig.from_json(_inside(root, path).read_text(encoding="utf-8"))
    except ConfigError as error:
        raise ImportRefused(f"{directory / CONFIG_FILE} is not a valid run config: {error}") from error
    except UnicodeDecodeError as error:
        raise ImportRefused(f"{directory / CONFIG_FILE} is not UTF-8 text: {error}") from error
    try:
        return config_admit(team=team, base=config, existing=False).config
    except InvalidInput as error:
        refused = f"{directory / CONFIG_FILE} is refused, as a submission would be: {error.message}"
        raise ImportRefused(refused) from error


def _events_read(path: Path) -> list[Line]:
    """Every event with its line number; a torn last line (a run killed mid-write) is skipped, as the engine does."""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    lines: list[Line] = []
    for number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            data: Any = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(text):
                break
            raise ImportRefused(f"{EVENTS_FILE} line {number} is not JSON: {error}") from error
        try:
            lines.append((number, ev.event_from_dict(data)))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ImportRefused(f"{EVENTS_FILE} line {number} is not an engine event: {error!r}") from error
        event = lines[-1][1]
        if isinstance(event, ev.CheckpointSaved) and not CHECKPOINT_NAME.fullmatch(Path(event.path).name):
            raise ImportRefused(f"{EVENTS_FILE} line {number}: a checkpoint outside {CHECKPOINTS_DIR}/step-NNNNNN")
    return lines


def _attempts(lines: list[Line]) -> list[list[Line]]:
    """The events of the directory's last run, split where `--resume` started it again. A fresh start in the
    same directory (`run_started` from step 0) replaces what came before it."""
    starts = [(i, e.resumed_from_step) for i, (_, e) in enumerate(lines) if isinstance(e, ev.RunStarted)]
    begin = max((i for i, resumed in starts if not resumed), default=0)
    cuts = [i for i, _ in starts if i > begin]
    bounds = [begin, *cuts, len(lines)]
    return [lines[a:b] for a, b in itertools.pairwise(bounds)]


def _outcome(attempt: list[Line]) -> tuple[str, str, datetime | None]:
    """Status, error and end time from the attempt's end event."""
    end = next((e for _, e in reversed(attempt) if isinstance(e, ev.RunFinished | ev.RunFailed)), None)
    last = attempt[-1][1]
    if end is None:
        step = max((e.step for _, e in attempt if isinstance(e, ev.StepCompleted)), default=0)
        error = f"{NO_END_EVENT}: the command line run stopped after step {step} (killed, or still running)"
        return Run.Status.FAILED, error, datetime.fromtimestamp(last.time, tz=UTC)
    when = datetime.fromtimestamp(end.time, tz=UTC)
    if isinstance(end, ev.RunFailed):
        return Run.Status.FAILED, end.error or "the engine reported a failure", when
    if end.status not in ENDS:
        return Run.Status.FAILED, f"the engine ended the run with status {end.status!r}", when
    return ENDS[end.status], "", when


def _checkpoint_names(attempts: list[list[Line]]) -> list[str]:
    saved = {Path(e.path).name for attempt in attempts for _, e in attempt if isinstance(e, ev.CheckpointSaved)}
    return sorted(saved)


def _checkpoint_files(root: Path, name: str) -> list[tuple[Path, Path]]:
    """The files of checkpoints/<name> (none when the engine already deleted it), links followed inside `root`."""
    directory = root / CHECKPOINTS_DIR / name
    if not directory.exists():
        return []
    real_dir = _inside(root, directory)
    files = []
    for folder, dirs, names in os.walk(real_dir):
        for entry in dirs:
            if (Path(folder) / entry).is_symlink():
                shown = (Path(folder) / entry).relative_to(root)
                _inside(root, Path(folder) / entry)
                raise ImportRefused(f"{shown} is a link to a directory; only links to files are followed")
        for entry in names:
            real = _inside(root, Path(folder) / entry)
            if real.is_file():
                relative = (Path(folder) / entry).relative_to(real_dir)
                files.append((Path(CHECKPOINTS_DIR) / name / relative, real))
    return files


# -- writing the run ---------------------------------------------------------------------------------------------


def _copy_files(source: RunSource, target: Path) -> None:
    """Checkpoint files are hard-linked when possible (the engine never rewrites them); the top-level files are
    copied, since a resumed command line run appends to events.jsonl and rewrites the others in place."""
    target.mkdir(parents=True)
    for relative, real in source.files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if relative.parts[0] == CHECKPOINTS_DIR:
            try:
                os.link(real, destination)
                continue
            except OSError:
                pass
        shutil.copy2(real, destination)


def _run_create(source: RunSource, *, run_id: uuid.UUID, team: Team, user: User, name: str) -> Run:
    config = source.config
    return Run.objects.create(
        id=run_id,
        team=team,
        creator=user,
        name=name[:200],
        status=source.status,
        backend=config.backend.name,
        config=config.to_dict(),
        seed=config.seed,
        total_steps=config_total_steps(config),
        error=source.error,
        started_at=source.started,
        finished_at=source.ended,
    )


def _replay(run: Run, source: RunSource, target: Path) -> None:
    """Every event through the sink the workers use; a resumed attempt first drops what the one before it stored
    after its checkpoint, as a worker does when it resumes."""
    reached = 0
    try:
        for index, attempt in enumerate(source.attempts):
            first = attempt[0][1]
            if index and isinstance(first, ev.RunStarted):
                run_discard_after(run=run, step=first.resumed_from_step)
            sink = DatabaseSink(run.pk, max_delay=float("inf"))
            for line, event in attempt:
                reached = line
                sink.emit(_relocated(event, target))
            sink.flush()
    except (DatabaseError, TypeError, ValueError, KeyError, AttributeError) as error:
        raise ImportRefused(f"{EVENTS_FILE}: the events up to line {reached} could not be stored: {error!r}") from error
    checkpoints_refresh(run_id=run.pk)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=None)


def _relocated(event: ev.Event, target: Path) -> ev.Event:
    """Checkpoint paths as they are after the copy (the events hold the paths of the machine that trained)."""
    if isinstance(event, ev.CheckpointSaved):
        return replace(event, path=str(target / CHECKPOINTS_DIR / Path(event.path).name))
    if isinstance(event, ev.EvalCompleted) and event.checkpoint:
        return replace(event, checkpoint=str(target / CHECKPOINTS_DIR / Path(event.checkpoint).name))
    return event
