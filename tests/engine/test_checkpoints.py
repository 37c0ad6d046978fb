"""The checkpoint layout: naming, the newest complete one, atomic writes, retention, and a cheap import."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inspo_engine.checkpoints import (
    POLICY_DIR,
    STATE_FILE,
    checkpoint_path,
    checkpoint_step,
    drop_old_checkpoints,
    latest_checkpoint,
    read_state,
    write_checkpoint,
)


def write_policy(directory: Path) -> None:
    (directory / POLICY_DIR).mkdir()
    (directory / POLICY_DIR / "config.json").write_text("{}", encoding="utf-8")


def test_a_checkpoint_holds_the_policy_and_the_state_under_its_step(tmp_path: Path) -> None:
    directory = checkpoint_path(tmp_path, 7)
    size = write_checkpoint(directory, {"progress": {"step": 7}}, write_policy)
    assert directory == tmp_path / "checkpoints" / "step-000007" and checkpoint_step(directory) == 7
    assert read_state(directory) == {"progress": {"step": 7}}
    assert size == len(json.dumps({"progress": {"step": 7}})) + 2
    assert not directory.with_name("step-000007.partial").exists()


def test_the_latest_checkpoint_is_the_newest_with_a_state_file(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 10):
        write_checkpoint(checkpoint_path(tmp_path, step), {}, write_policy)
    (checkpoint_path(tmp_path, 12) / POLICY_DIR).mkdir(parents=True)  # a checkpoint cut short: no state
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 10)
    assert (latest_checkpoint(tmp_path) or tmp_path).joinpath(STATE_FILE).is_file()


def test_a_failed_write_leaves_the_previous_checkpoint_of_that_step(tmp_path: Path) -> None:
    directory = checkpoint_path(tmp_path, 3)
    write_checkpoint(directory, {"v": 1}, write_policy)

    def broken(partial: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(directory, {"v": 2}, broken)
    assert read_state(directory) == {"v": 1}


def test_only_the_newest_keep_last_checkpoints_stay(tmp_path: Path) -> None:
    for step in range(1, 5):
        write_checkpoint(checkpoint_path(tmp_path, step), {}, write_policy)
    drop_old_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000003", "step-000004"]
    drop_old_checkpoints(tmp_path, 0)
    assert len(list((tmp_path / "checkpoints").iterdir())) == 2


def test_importing_the_layout_loads_neither_the_loop_nor_an_optimizer_sdk() -> None:
    code = (
        "import sys\n"
        "import inspo_engine.checkpoints\n"
        "bad = [n for n in ('inspo_engine.coevolution', 'google.genai') if n in sys.modules]\n"
        "print(bad); assert not bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
