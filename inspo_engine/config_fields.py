"""The machinery under the run config: number bounds, field errors, building typed dataclasses from JSON-like dicts
with type checks, and dotted leaf paths. It knows no section of the config (`inspo_engine.config` does)."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin

T = TypeVar("T")

BOUNDS = "inspo_bounds"
"""The field metadata key of a number's allowed range (see `bounded`)."""


@dataclass(frozen=True)
class Bounds:
    """A number field's allowed range: low (exclusive unless `inclusive`) up to high (inclusive); None = unbounded.
    Every resource a run consumes (batch, memory, optimizer calls, disk) has a finite upper bound: generous, and
    above the paper's numbers."""

    low: float | None
    high: float | None
    inclusive: bool = True

    def admits(self, value: float) -> bool:
        too_low = self.low is not None and (value < self.low if self.inclusive else value <= self.low)
        return not too_low and not (self.high is not None and value > self.high)

    def describe(self) -> str:
        """What validation says of a value outside, e.g. 'must be ≥ 2 and ≤ 64'.

        >>> Bounds(0, 1, inclusive=False).describe()
        'must be > 0 and ≤ 1'
        """
        low, high = self.low, self.high
        left = "—" if low is None else (f"≥ {_number(low)}" if self.inclusive else f"> {_number(low)}")
        right = "" if high is None else f" and ≤ {_number(high)}"
        return f"must be {left}{right}"


def _number(value: float) -> str:
    """1000000 rather than 1e+06: a bound reads as written."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def bounded(default: T, low: float | None, high: float | None, *, inclusive: bool = True) -> T:
    """A number field with its default and its allowed range, which `RunConfig.validate` checks."""
    result: T = field(default=default, metadata={BOUNDS: Bounds(low, high, inclusive)})
    return result


@dataclass(frozen=True)
class FieldError:
    """One invalid field: its dotted path and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ConfigError(ValueError):
    """A config failed validation; `errors` names each field."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(error) for error in errors))


# -- building from dicts, with type checks ---------------------------------------------------------------------


def build(cls: type, data: Any, prefix: str = "") -> tuple[Any, list[FieldError]]:
    if not isinstance(data, dict):
        return None, [FieldError(prefix.rstrip("."), "must be an object")]
    hints = type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    errors = [FieldError(prefix + key, "unknown field") for key in data if key not in known]
    kwargs: dict[str, Any] = {}
    for name in known:
        if name not in data:
            continue
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            kwargs[name], sub_errors = build(hint, data[name], f"{prefix}{name}.")
            errors += sub_errors
            continue
        value, error = _coerce(data[name], hint)
        if error:
            errors.append(FieldError(prefix + name, error))
        else:
            kwargs[name] = value
    if errors:
        return None, errors
    return cls(**kwargs), []


def _coerce(value: Any, hint: Any) -> tuple[Any, str | None]:
    """Check `value` against a field's type; ints are accepted for floats. Returns (value, error)."""
    origin = get_origin(hint)
    if origin is Literal:
        allowed = get_args(hint)
        return (value, None) if value in allowed else (None, f"must be one of {', '.join(map(repr, allowed))}")
    if origin in (types.UnionType, typing.Union):
        options = get_args(hint)
        if value is None:
            return (None, None) if type(None) in options else (None, "must not be null")
        return _coerce(value, next(o for o in options if o is not type(None)))
    if origin is list:
        (item,) = get_args(hint)
        if not isinstance(value, list):
            return None, f"must be a list of {item.__name__}"
        if not all(isinstance(v, item) for v in value):
            return None, f"every item must be a {item.__name__}"
        return list(value), None
    if hint is bool:
        return (value, None) if isinstance(value, bool) else (None, "must be true or false")
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (value, None) if ok else (None, "must be an integer")
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return (float(value), None) if ok else (None, "must be a number")
    if hint is str:
        return (value, None) if isinstance(value, str) else (None, "must be a string")
    raise TypeError(f"unsupported config type {hint!r}")


def bounds_errors(value: Any, path: str = "") -> list[FieldError]:
    """Every number outside the bounds its field declares (see `bounded`), in field order."""
    errors = []
    for f in dataclasses.fields(value):
        where, current = f"{path}.{f.name}" if path else f.name, getattr(value, f.name)
        if dataclasses.is_dataclass(current):
            errors += bounds_errors(current, where)
        elif (bounds := f.metadata.get(BOUNDS)) is not None and current is not None and not bounds.admits(current):
            errors.append(FieldError(where, f"{bounds.describe()}, got {current!r}"))
    return errors


def string_fields(value: Any, path: str) -> typing.Iterator[tuple[str, str]]:
    """(dotted path, text) of every string in the config, list items included."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from string_fields(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(value, str):
        yield path, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from string_fields(item, f"{path}[{i}]")


# -- dotted paths ----------------------------------------------------------------------------------------------


@functools.cache
def leaf_paths(cls: type, prefix: str = "") -> tuple[str, ...]:
    paths: list[str] = []
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            paths += leaf_paths(hints[f.name], f"{prefix}{f.name}.")
        else:
            paths.append(prefix + f.name)
    return tuple(paths)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints` of a config class, resolved once: the classes never change, and resolving the string
    annotations again for every override key and every loaded config was a sixth of the web tests' time."""
    return typing.get_type_hints(cls)


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as JSON when it parses, else kept as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError([FieldError("", f"override {text!r} must look like key=value")])
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value
