"""Steering a live run by hand: typed requests (inject an instruction, pin, unpin or retire one), the channel the loop
polls for them at every step boundary, and how each is applied to the population — or rejected, and why. An accepted
injection into a full population retires the lowest-weight unpinned member to make room, and says so. It knows
the population and evolution's verification; nothing of where requests come from (a file here, the web app's
database in its workers).

A request is handled once: the ids handled, with the step each was handled before, are part of the run's saved
state. A resumed run replays exactly: a request a lost attempt handled after the checkpoint comes back with
`at_step`, the step it was handled before, and is handled before that same step again; verification draws its
questions from an rng of its own (the run's seed and the request's id), so no stream of the run moves because of it.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .config import MAX_INSTRUCTION_CHARS, RunConfig
from .events import ControlHandled
from .population import Instruction, Population
from .proposers import missing_tags, required_tags

if TYPE_CHECKING:
    from .evolution import Evolution

REQUESTS_FILE = "control.jsonl"
"""Inside a run directory: the requests of the file channel, one JSON object per line."""
OUTCOMES_FILE = "control_outcomes.jsonl"
"""Inside a run directory: the file channel's record of when each request was handled (for exact replay)."""


@dataclass(frozen=True)
class Inject:
    """Add a person's instruction: verified like the optimizer's candidates (against I*), or unscored with
    `verify=False`. It joins with origin `human` and its author in the lineage."""

    kind: ClassVar[str] = "inject"
    text: str
    author: str = ""
    verify: bool = True


@dataclass(frozen=True)
class Pin:
    """Keep an instruction through pruning and evolution's replacement."""

    kind: ClassVar[str] = "pin"
    instruction_id: str
    author: str = ""


@dataclass(frozen=True)
class Unpin:
    """Let pruning and evolution treat a pinned instruction like any other again."""

    kind: ClassVar[str] = "unpin"
    instruction_id: str
    author: str = ""


@dataclass(frozen=True)
class Retire:
    """Take an instruction out of the population now (not a pinned one, not the last one)."""

    kind: ClassVar[str] = "retire"
    instruction_id: str
    author: str = ""


@dataclass(frozen=True)
class Invalid:
    """A request the channel could not read; handling it rejects it with `reason`."""

    kind: ClassVar[str] = "invalid"
    reason: str
    author: str = ""


Action = Inject | Pin | Unpin | Retire | Invalid
TARGETED: dict[str, type[Pin | Unpin | Retire]] = {cls.kind: cls for cls in (Pin, Unpin, Retire)}
"""The actions that name an instruction, by kind."""
KINDS = ("inject", *TARGETED)


@dataclass(frozen=True)
class ControlRequest:
    """One request: `id` is unique within the run; `at_step` is set only when it is replayed after a resume."""

    id: str
    action: Action
    at_step: int | None = None


class ControlChannel(Protocol):
    """Where a run's requests come from. `poll` is asked at every step boundary and may return requests already
    handled (the loop skips them); `record` hears each outcome, so a channel that must replay a run can."""

    def poll(self) -> Sequence[ControlRequest]: ...

    def record(self, outcome: ControlHandled) -> None: ...


class NoControl:
    """A run nobody steers."""

    def poll(self) -> Sequence[ControlRequest]:
        return ()

    def record(self, outcome: ControlHandled) -> None:
        return None


# -- the wire format: one JSON object per request ------------------------------------------------------------------


def request_to_dict(request: ControlRequest) -> dict[str, Any]:
    """`{"id", "kind", …the action's fields, "at_step"}`.

    >>> request_to_dict(ControlRequest("7", Pin("ins-0003", author="ada")))
    {'id': '7', 'kind': 'pin', 'instruction_id': 'ins-0003', 'author': 'ada', 'at_step': None}
    """
    fields = {name: getattr(request.action, name) for name in request.action.__dataclass_fields__}
    return {"id": request.id, "kind": request.action.kind, **fields, "at_step": request.at_step}


def request_from_dict(data: Mapping[str, Any], fallback_id: str) -> ControlRequest:
    """The request a JSON object describes; one that is not a valid request becomes an Invalid action (with the
    object's id, else `fallback_id`) so that its rejection is reported like any other outcome.

    >>> request_from_dict({"id": "1", "kind": "retire", "instruction_id": "ins-0002"}, "x").action
    Retire(instruction_id='ins-0002', author='')
    >>> request_from_dict({"kind": "pin"}, "line-4")
    ControlRequest(id='line-4', action=Invalid(reason="a pin request needs 'instruction_id'", author=''), at_step=None)
    """
    request_id = data.get("id")
    request_id = str(request_id) if isinstance(request_id, str | int) and str(request_id) else fallback_id
    at_step = data.get("at_step")
    at_step = at_step if isinstance(at_step, int) and not isinstance(at_step, bool) else None
    return ControlRequest(request_id, _action(data), at_step)


def _action(data: Mapping[str, Any]) -> Action:
    kind, given = data.get("kind"), data.get("author")
    author = given if isinstance(given, str) else ""
    if kind == "inject":
        text, verify = data.get("text"), data.get("verify", True)
        if not isinstance(text, str) or not isinstance(verify, bool):
            return Invalid("an inject request needs 'text' (a string) and 'verify' (true or false)", author)
        return Inject(text, author, verify)
    cls = TARGETED.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Invalid(f"unknown kind {kind!r}; one of {', '.join(KINDS)}", author)
    instruction_id = data.get("instruction_id")
    if not isinstance(instruction_id, str):
        return Invalid(f"a {kind} request needs 'instruction_id'", author)
    return cls(instruction_id, author)


class FileControlChannel:
    """Requests appended to `control.jsonl` in the run directory (by hand, by `python -m inspo_engine control`, or
    by the web app's worker for a verl job); outcomes recorded in `control_outcomes.jsonl` beside it, so a run
    resumed in the same directory replays each request before the step it was handled before."""

    def __init__(self, run_dir: Path) -> None:
        self.requests = run_dir / REQUESTS_FILE
        self.outcomes = run_dir / OUTCOMES_FILE

    def poll(self) -> list[ControlRequest]:
        handled_at = {str(o.get("request_id")): o.get("step") for o in _read_lines(self.outcomes)}
        requests = []
        for number, data in enumerate(_read_lines(self.requests), start=1):
            request = request_from_dict(data, f"line-{number}")
            step = handled_at.get(request.id)
            if request.at_step is None and isinstance(step, int):
                request = ControlRequest(request.id, request.action, step)
            requests.append(request)
        return requests

    def record(self, outcome: ControlHandled) -> None:
        with self.outcomes.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"request_id": outcome.request_id, "step": outcome.step}) + "\n")

    def append(self, request: ControlRequest) -> None:
        """Add one request (what the CLI's `control` command does)."""
        self.requests.parent.mkdir(parents=True, exist_ok=True)
        with self.requests.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(request_to_dict(request), ensure_ascii=False) + "\n")

    def replace(self, requests: Sequence[ControlRequest]) -> None:
        """Make the file hold exactly `requests`, atomically (a worker relaying its pending requests)."""
        self.requests.parent.mkdir(parents=True, exist_ok=True)
        partial = self.requests.with_suffix(".partial")
        lines = "".join(json.dumps(request_to_dict(r), ensure_ascii=False) + "\n" for r in requests)
        partial.write_text(lines, encoding="utf-8")
        os.replace(partial, self.requests)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a line that is not an object (a torn last one) is skipped."""
    if not path.exists():
        return []
    objects = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            objects.append(data)
    return objects


# -- applying requests -------------------------------------------------------------------------------------------


class Deferred(Exception):
    """The request cannot be handled yet (verification needs the replay buffer's first questions)."""


@dataclass
class Steering:
    """Applies a channel's requests to the population, before the loop samples a step's instructions; remembers
    which requests it handled (part of the run's state)."""

    config: RunConfig
    evolution: Evolution
    handled: dict[str, int] = field(default_factory=dict)
    """Request id → the step it was handled before."""

    def apply(self, channel: ControlChannel, step: int) -> None:
        """Handle every request not handled yet whose time has come (`at_step`, when replayed, ≤ `step`), in the
        channel's order; the population goes out once more ("steered") when its membership changed."""
        changed = False
        for request in channel.poll():
            if request.id in self.handled or (request.at_step is not None and request.at_step > step):
                continue
            try:
                status, message, instruction, score = self._handle(request, step)
            except Deferred:
                continue
            changed = changed or (status == "applied" and request.action.kind in ("inject", "retire"))
            outcome = ControlHandled(
                step=step,
                request_id=request.id,
                action=request.action.kind,
                status=status,
                message=message,
                author=request.action.author,
                instruction_id=instruction.id if instruction else _named(request.action),
                verify_score=score,
            )
            self.handled[request.id] = step
            self.evolution.sink.emit(outcome)
            channel.record(outcome)
        if changed:
            self.evolution.emit_population(step, "steered")

    def _handle(self, request: ControlRequest, step: int) -> tuple[str, str, Instruction | None, float | None]:
        """(applied or rejected, what happened, the instruction it added or named, a verification score)."""
        action = request.action
        if isinstance(action, Invalid):
            return "rejected", action.reason, None, None
        if isinstance(action, Inject):
            return self._inject(request.id, action, step)
        population = self.evolution.population
        if action.instruction_id not in population.archive:
            return "rejected", f"no instruction {action.instruction_id} in this run", None, None
        target = population.get(action.instruction_id)
        if not target.alive:
            why = f"{target.id} was retired at step {target.prune_step} ({target.removal_reason})"
            return "rejected", why, None, None
        if isinstance(action, Pin | Unpin):
            pin = isinstance(action, Pin)
            message = f"{target.id} {'pinned' if pin else 'unpinned'}"
            if target.pinned == pin:
                message = f"{target.id} was already {'pinned' if pin else 'not pinned'}"
            target.pinned = pin
            return "applied", message, target, None
        if target.pinned:
            return "rejected", f"{target.id} is pinned: unpin it first", target, None
        if len(population) <= 1:
            return "rejected", f"{target.id} is the last living instruction", target, None
        by = f" by {action.author}" if action.author else ""
        self.evolution.retire(target, step, f"retired by hand{by}")
        return "applied", f"{target.id} retired", target, None

    def _inject(self, request_id: str, action: Inject, step: int) -> tuple[str, str, Instruction | None, float | None]:
        population, text = self.evolution.population, action.text.strip()
        refusal = self._inject_refusal(text, action.verify)
        if refusal:
            return "rejected", refusal, None, None
        score = None
        how = "joined unverified, as asked"
        if action.verify:
            evo = self.config.evolution
            if evo.verify and not len(self.evolution.replay):
                raise Deferred
            rng = random.Random(f"{self.config.seed}:control:{request_id}")
            reference = population.best()
            verdict = self.evolution.verify_outside(step, text, round_id=f"control-{request_id}", rng=rng)
            if not verdict.accepted:
                why = (verdict.reason or "").replace("its parent", f"I* ({reference.id})")
                return "rejected", f"verification: {why}", None, verdict.score
            score = verdict.score
            how = (
                f"verified: scored {score:.3f} against I* ({reference.id})"
                if score is not None
                else "joined unscored: this run does not verify candidates (evolution.verify is false)"
            )
        room = self._make_room(step, action.author)
        added = self.evolution.add(
            text, origin="human", step=step, parent_id=None, score=score, author=action.author or None
        )
        return "applied", f"{added.id} {how}{room}", added, score

    def _make_room(self, step: int, author: str) -> str:
        """A full population makes room for an accepted injection: its lowest-weight unpinned member retires. What
        was done, as the end of the outcome's message ('' when there was room)."""
        population = self.evolution.population
        if len(population) < population.max_size:
            return ""
        victim = _lowest_unpinned(population)
        assert victim is not None  # _inject_refusal refused the injection otherwise
        by = f" by {author}" if author else ""
        self.evolution.retire(victim, step, f"retired to make room for an instruction injected{by}")
        return f"; the population was full, so {victim.id} (the lowest-weight unpinned member) retired to make room"

    def _inject_refusal(self, text: str, verify: bool) -> str | None:
        """Why an instruction cannot join, before any verification; None when it can."""
        population = self.evolution.population
        if not text:
            return "the instruction is empty"
        if len(text) > MAX_INSTRUCTION_CHARS:
            return f"the instruction has {len(text)} characters; at most {MAX_INSTRUCTION_CHARS}"
        twin = next((m for m in population.members if _same(m.text, text)), None)
        if twin is not None:
            return f"the population already holds it as {twin.id}"
        if len(population) >= population.max_size and _lowest_unpinned(population) is None:
            return (
                f"the population is full ({len(population)} of {population.max_size}) and every member is pinned: "
                "unpin or retire one first"
            )
        missing = missing_tags(text, required_tags(self.config.population.seed_instruction)) if verify else []
        if missing:
            return f"it drops protocol tags the seed instruction uses ({', '.join(missing)}), which verification needs"
        return None

    def to_state(self) -> dict[str, Any]:
        return {"handled": dict(self.handled)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.handled = {str(key): int(step) for key, step in state.get("handled", {}).items()}


def _named(action: Action) -> str | None:
    return getattr(action, "instruction_id", None)


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


def _lowest_unpinned(population: Population) -> Instruction | None:
    """The member a full population retires for an injection: the unpinned one ranked last (lowest weight, the
    younger on ties); None when every member is pinned."""
    return next((m for m in reversed(population.ranked()) if not m.pinned), None)
