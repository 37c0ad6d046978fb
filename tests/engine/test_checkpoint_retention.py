"""What a run keeps on disk: keep_last checkpoints, and the optimizer state — which only resuming needs — in the newest
checkpoint of a run that can still resume (optimizer_state 'latest'), or in every one ('all'); each CheckpointSaved
says how much of it is optimizer state and what all checkpoints take once retention ran."""

import json
from pathlib import Path

import pytest

from inspo_engine.checkpoints import (
    OPTIMIZER_DIR,
    POLICY_DIR,
    checkpoint_path,
    directory_bytes,
    drop_optimizer_state,
    latest_checkpoint,
    write_checkpoint,
)
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import CheckpointSaved, ListSink

from .fakes import ScriptedBackend, questions

OPTIMIZER_BYTES = 20_000


class ResumableBackend(ScriptedBackend):
    """The scripted policy, with an optimizer state beside it as the torch backend writes one (`training/`), which
    it needs to load."""

    def save(self, directory: Path) -> None:
        super().save(directory)
        (directory / OPTIMIZER_DIR).mkdir()
        (directory / OPTIMIZER_DIR / "trainer_state.pt").write_bytes(b"\1" * OPTIMIZER_BYTES)

    def load(self, directory: Path) -> None:
        if not (directory / OPTIMIZER_DIR / "trainer_state.pt").is_file():
            raise FileNotFoundError("no optimizer state")
        super().load(directory)


def config(**checkpoint):
    return RunConfig.from_dict(
        {
            "seed": 2,
            "grpo": {"total_steps": 6, "group_size": 2, "batch_size": 4, "mini_batch_size": 4, "micro_batch_size": 4},
            "population": {"population_size": 2, "paraphrase_init": False, "diversity": False},
            "evolution": {"enabled": False, "evolve_until": 6},
            "checkpoint": {"checkpoint_every": 2, "keep_last": 3, **checkpoint},
        }
    )


def train(tmp_path, cfg, sink, stop_after=None):
    done = []
    loop = CoEvolution(
        cfg,
        backend=ResumableBackend(seed=1),
        train_questions=questions(16),
        optimizer=None,
        sink=sink,
        out_dir=tmp_path,
        should_stop=lambda: stop_after is not None and (done.append(1) or len(done) >= stop_after),
    )
    return loop.run()


def kept(tmp_path):
    """{step directory: whether it keeps an optimizer state}."""
    return {p.name: (p / OPTIMIZER_DIR).is_dir() for p in sorted((tmp_path / "checkpoints").iterdir())}


@pytest.mark.slow
def test_a_finished_run_keeps_its_policies_and_states_but_no_optimizer_state(tmp_path):
    sink = ListSink()
    train(tmp_path, config(), sink)
    assert kept(tmp_path) == {"step-000002": False, "step-000004": False, "step-000006": False}
    saved = sink.of(CheckpointSaved)
    assert [(e.step, e.optimizer_bytes) for e in saved] == [(2, OPTIMIZER_BYTES), (4, OPTIMIZER_BYTES), (6, 0)]
    on_disk = sum(directory_bytes(p) for p in (tmp_path / "checkpoints").iterdir())
    assert saved[-1].disk_bytes == on_disk
    assert saved[1].disk_bytes == saved[0].bytes - OPTIMIZER_BYTES + saved[1].bytes, "step 2 lost its state at 4"
    for step in (2, 4, 6):
        assert (checkpoint_path(tmp_path, step) / POLICY_DIR / "scripted.json").is_file()
        assert (
            json.loads((checkpoint_path(tmp_path, step) / "inspo_state.json").read_text())["progress"]["step"] == step
        )


@pytest.mark.slow
def test_a_stopped_run_keeps_the_optimizer_state_of_its_newest_checkpoint_and_resumes_from_it(tmp_path):
    result = train(tmp_path, config(), ListSink(), stop_after=3)
    assert result.status == "cancelled"
    assert kept(tmp_path) == {"step-000002": False, "step-000003": True}
    resumed = CoEvolution(
        config(), backend=ResumableBackend(), train_questions=questions(16), optimizer=None, sink=ListSink()
    )
    resumed.load_checkpoint(latest_checkpoint(tmp_path))
    assert resumed.progress.step == 3
    with pytest.raises(FileNotFoundError):
        resumed.load_checkpoint(checkpoint_path(tmp_path, 2))


@pytest.mark.slow
def test_all_keeps_the_optimizer_state_in_every_checkpoint(tmp_path):
    sink = ListSink()
    train(tmp_path, config(optimizer_state="all", keep_last=2), sink)
    assert kept(tmp_path) == {"step-000004": True, "step-000006": True}
    assert [e.optimizer_bytes for e in sink.of(CheckpointSaved)] == [OPTIMIZER_BYTES] * 3


def test_dropping_optimizer_states_leaves_the_newest_and_every_policy(tmp_path):
    def write(directory):
        (directory / POLICY_DIR).mkdir()
        (directory / POLICY_DIR / "weights").write_bytes(b"w")
        (directory / OPTIMIZER_DIR).mkdir()

    for step in (1, 2, 3):
        write_checkpoint(checkpoint_path(tmp_path, step), {}, write)
    assert [p.name for p in drop_optimizer_state(tmp_path, keep=1)] == ["step-000001", "step-000002"]
    assert kept(tmp_path) == {"step-000001": False, "step-000002": False, "step-000003": True}
    assert drop_optimizer_state(tmp_path, keep=0) == [checkpoint_path(tmp_path, 3)]
    assert all((checkpoint_path(tmp_path, s) / POLICY_DIR / "weights").is_file() for s in (1, 2, 3))
    write_checkpoint(checkpoint_path(tmp_path, 4), {}, write, optimizer_state=False)
    assert not (checkpoint_path(tmp_path, 4) / OPTIMIZER_DIR).exists()
