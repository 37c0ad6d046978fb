"""The engine's control channel for a run of the web app: the run's pending control requests, read from the database
at each step boundary (as the stop check reads the run's status), and relayed to a verl job as the control file it
polls. Outcomes come back as the engine's events, which the database sink stores; this module writes nothing to
the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from inspo_engine.control import TARGETED, Action, ControlRequest, FileControlChannel, Inject, Invalid
from inspo_engine.events import ControlHandled
from webapp.runs.models import ControlRequest as ControlRow
from webapp.runs.selectors import control_requests_pending


def engine_request(row: ControlRow) -> ControlRequest:
    """The engine's request for a stored one: its id is the row's primary key, `at_step` the step a rewound run
    replays it before."""
    return ControlRequest(str(row.pk), _action(row), row.applied_at_step)


def _action(row: ControlRow) -> Action:
    payload, author = row.payload, row.author_name
    if row.kind == ControlRow.Kind.INJECT:
        return Inject(str(payload.get("text", "")), author, verify=bool(payload.get("verify", True)))
    cls = TARGETED.get(row.kind)
    if cls is None:
        return Invalid(f"unknown kind {row.kind!r}", author)
    return cls(str(payload.get("instruction_id", "")), author)


class DatabaseControl:
    """The run's pending requests, oldest first, each time the engine asks (once per step)."""

    def __init__(self, run_id: UUID | str) -> None:
        self.run_id = run_id

    def poll(self) -> list[ControlRequest]:
        return [engine_request(row) for row in control_requests_pending(run_id=self.run_id)]

    def record(self, outcome: ControlHandled) -> None:
        """Nothing: the outcome is an event, and the database sink stores it with the step."""


class ControlRelay:
    """For a verl job, which cannot reach the database: the pending requests written to the run directory's
    control file whenever they change (`sync`, called as the worker polls the job)."""

    def __init__(self, control: DatabaseControl, run_dir: Path) -> None:
        self.control = control
        self.file = FileControlChannel(run_dir)
        self.written: Sequence[ControlRequest] | None = None

    def sync(self) -> None:
        pending = self.control.poll()
        if pending != self.written:
            self.file.replace(pending)
            self.written = pending
