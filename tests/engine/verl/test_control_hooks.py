"""verl's trainer honours a person's control requests exactly as the torch path does: the loop is
backend-independent (`CoEvolution.begin_step` applies them), and these drive it through the trainer's hooks with
verl's own batches (the Harness of test_trainer_hooks); tests/engine/test_control.py drives the torch path's loop."""

from __future__ import annotations

from pathlib import Path

from tests.engine.verl._support import require_verl

require_verl()

from inspo_engine.backends.verl.loop import INSTRUCTION_ID  # noqa: E402
from inspo_engine.control import ControlRequest, FileControlChannel, Inject, Pin, Retire  # noqa: E402
from inspo_engine.events import ControlHandled, InstructionAdded, InstructionPruned, PopulationChanged  # noqa: E402

from .test_trainer_hooks import Harness, instruction_of, paper_like  # noqa: E402

SEARCHING = "Think in <think> </think>, search with <search> </search> <information> </information> " + (
    "and search again before the <answer> </answer>: search, search."
)


def steered(tmp_path: Path, **overrides: object) -> tuple[Harness, FileControlChannel]:
    h = Harness(paper_like(**overrides), tmp_path)
    channel = FileControlChannel(tmp_path)
    h.loop.coevolution.control = channel
    h.loop.start()
    return h, channel


def test_requests_sent_during_a_step_apply_when_the_trainer_begins_the_next(tmp_path: Path) -> None:
    h, channel = steered(tmp_path)
    h.step(1)
    channel.append(ControlRequest("1", Retire("ins-0006", "ada")))
    channel.append(ControlRequest("2", Inject(SEARCHING, "ada")))
    channel.append(ControlRequest("3", Pin("ins-0000", "ada")))
    assert not h.sink.of(ControlHandled)  # nothing happens before the trainer's next hook
    rolled = h.step(2)
    handled = {e.request_id: e for e in h.sink.of(ControlHandled)}
    assert [(e.status, e.step) for e in handled.values()] == [("applied", 2)] * 3
    added = [e for e in h.sink.of(InstructionAdded) if e.instruction.origin == "human"]
    assert len(added) == 1 and added[0].instruction.author == "ada" and added[0].verify_score is not None
    new_id = added[0].instruction.id
    assert [e.reason for e in h.sink.of(InstructionPruned)] == ["retired by hand by ada"]
    assert h.loop.population.get("ins-0000").pinned
    # the population the step sampled from already held the new member and had lost the retired one
    snapshot = next(e for e in h.sink.of(PopulationChanged) if e.reason == "steered")
    assert new_id in {m.id for m in snapshot.members} and "ins-0006" not in {m.id for m in snapshot.members}
    assert "ins-0006" not in set(rolled.non_tensor_batch[INSTRUCTION_ID])
    texts = {h.loop.population.get(i).text for i in rolled.non_tensor_batch[INSTRUCTION_ID]}
    assert texts == {instruction_of(p) for p in rolled.non_tensor_batch["raw_prompt"]}


def test_a_pinned_instruction_survives_the_papers_pruning_and_evolution_under_verl(tmp_path: Path) -> None:
    h, channel = steered(tmp_path)
    channel.append(ControlRequest("1", Pin("ins-0006", "ada")))
    for step in range(1, 17):
        h.step(step)
    assert h.loop.population.get("ins-0006").alive
    assert not [e for e in h.sink.of(InstructionPruned) if e.instruction_id == "ins-0006"]
    pruned_at = sorted({e.step for e in h.sink.of(InstructionPruned)})
    assert pruned_at and set(pruned_at) <= {5, 10, 15}
    sizes = [len(e.members) for e in h.sink.of(PopulationChanged)]
    assert max(sizes) == 7 and min(sizes) >= 2
    assert any(e.reason == "evolved" and e.step == 15 for e in h.sink.of(PopulationChanged))
