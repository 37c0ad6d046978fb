"""The checkpoint layout of a run directory: `checkpoints/step-NNNNNN/{policy/, inspo_state.json, training/, merged/}`:
naming, the newest, atomic writes, retention (of checkpoints, and of the optimizer state only resuming needs), sizes
and reading the saved state. It knows files, not what the state means or how a backend writes its policy; it
imports nothing of the engine, so the web app can read a checkpoint cheaply.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CHECKPOINTS_DIR = "checkpoints"
"""Inside a run directory: one directory per checkpoint."""
STATE_FILE = "inspo_state.json"
"""Inside a checkpoint: the loop's state (population, replay buffer, rngs, progress) as JSON."""
POLICY_DIR = "policy"
"""Inside a checkpoint: the policy as a Hugging Face directory (what users download and `eval` loads)."""
CHECKPOINT_NAME = re.compile(r"step-\d+")
"""A checkpoint directory's name."""
OPTIMIZER_DIR = "training"
"""Inside a checkpoint: the backend's optimizer, scheduler and rng state, which only resuming needs (a backend that
keeps these elsewhere, as verl does, writes none)."""
MERGED_DIR = "merged"
"""Inside the last checkpoint of a LoRA run: the policy with its adapters merged, a plain Hugging Face directory
(its `policy/` holds the adapters alone)."""
PARTIAL_SUFFIX = ".partial"
"""A checkpoint being written: renamed to its own name once complete."""


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint of `step`.

    >>> checkpoint_name(45)
    'step-000045'
    """
    return f"step-{step:06d}"


def checkpoint_path(out_dir: Path, step: int) -> Path:
    """Where the checkpoint of `step` lives in the run directory `out_dir`."""
    return out_dir / CHECKPOINTS_DIR / checkpoint_name(step)


def checkpoint_step(directory: Path) -> int:
    """The step a checkpoint directory holds, from its name.

    >>> checkpoint_step(Path("runs/x/checkpoints/step-000045"))
    45
    """
    return int(directory.name.removeprefix("step-"))


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The newest complete checkpoint under out_dir, if any."""
    found = sorted(p for p in (out_dir / CHECKPOINTS_DIR).glob("step-*") if (p / STATE_FILE).exists())
    return found[-1] if found else None


def write_checkpoint(
    directory: Path, state: Mapping[str, Any], write_policy: Callable[[Path], None], *, optimizer_state: bool = True
) -> int:
    """Write a checkpoint atomically: `write_policy` and the state go into `<directory>.partial`, which then
    replaces `directory`; a crash leaves the previous checkpoint of that step or none, never half of one. Without
    `optimizer_state` the backend's `training/` is left out. Returns the checkpoint's size in bytes."""
    partial = directory.with_name(directory.name + PARTIAL_SUFFIX)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    write_policy(partial)
    if not optimizer_state:
        shutil.rmtree(partial / OPTIMIZER_DIR, ignore_errors=True)
    (partial / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return directory_bytes(directory)


def directory_bytes(directory: Path) -> int:
    """The bytes of the regular files under `directory` (0 when it does not exist); links are not followed."""
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file() and not f.is_symlink())


def complete_checkpoints(out_dir: Path) -> list[Path]:
    """Every checkpoint directory under out_dir that is not being written, oldest first."""
    return sorted(p for p in (out_dir / CHECKPOINTS_DIR).glob("step-*") if not p.name.endswith(PARTIAL_SUFFIX))


def drop_old_checkpoints(out_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints (0 keeps every one)."""
    found = complete_checkpoints(out_dir)
    for old in found[:-keep_last] if keep_last else []:
        shutil.rmtree(old, ignore_errors=True)


def drop_optimizer_state(out_dir: Path, keep: int) -> list[Path]:
    """Delete the optimizer state (`training/`) of every checkpoint but the newest `keep` (0: of every one); the
    policies and states stay. Returns the checkpoints it was deleted from."""
    found = complete_checkpoints(out_dir)
    dropped = [p for p in (found[:-keep] if keep else found) if (p / OPTIMIZER_DIR).is_dir()]
    for checkpoint in dropped:
        shutil.rmtree(checkpoint / OPTIMIZER_DIR, ignore_errors=True)
    return dropped


def read_state(directory: Path) -> dict[str, Any]:
    """The loop state saved in the checkpoint `directory` (FileNotFoundError when it has none)."""
    state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    return state
