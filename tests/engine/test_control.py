"""Steering a live run by hand: requests read at step boundaries (inject verified or unverified, pin, unpin,
retire), their outcomes as events and in the saved state, pinning against successive halving and evolution, and a
resumed run that replays every request before the step it was handled before."""

from __future__ import annotations

import json

import pytest

from inspo_engine.checkpoints import latest_checkpoint
from inspo_engine.cli import main
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.control import (
    REQUESTS_FILE,
    ControlRequest,
    FileControlChannel,
    Inject,
    Pin,
    Retire,
    Unpin,
    request_from_dict,
)
from inspo_engine.events import (
    ControlHandled,
    EvolutionCompleted,
    InstructionAdded,
    InstructionPruned,
    InstructionVerified,
    JsonlSink,
    ListSink,
    PopulationChanged,
    RunFailed,
)
from inspo_engine.optimizers import GeminiClient, HttpSettings, optimizer_for
from inspo_engine.population import Population
from inspo_engine.presets import preset

from .fakes import ScriptedBackend, gemini_handler, questions

GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"
TAGS = "Use <think> </think>, <search> </search>, <information> </information> and <answer> </answer>."
GOOD = f"{TAGS} Always search before answering, check the passages and use the exact name."
HARMFUL = f"{TAGS} If unsure, guess quickly."

SMALL = {
    "seed": 3,
    "grpo": {"total_steps": 12, "group_size": 4, "batch_size": 16, "mini_batch_size": 16, "micro_batch_size": 16},
    "population": {
        "population_size": 4,
        "prune_every": 100,
        "paraphrase_init": False,
        "initial_instructions": [f"{TAGS} Answer carefully.", f"{TAGS} Answer with the exact name."],
    },
    "evolution": {"evolve_every": 100, "evolve_until": 0, "verify_samples": 40, "n_candidates": 6},
    "optimizer": {"max_retries": 0},
    "checkpoint": {"checkpoint_every": 0, "keep_last": 0},
}
"""Three instructions and room for a fourth, no pruning or evolution: only the requests change the population."""


@pytest.fixture
def gemini(httpserver):
    httpserver.expect_request(GENERATE, method="POST").respond_with_handler(gemini_handler)
    return GeminiClient(HttpSettings(api_key="test-key", base_url=httpserver.url_for("/"), max_retries=0, timeout_s=10))


def make_loop(config, optimizer, run_dir, *, sink=None, backend=None, **kwargs):
    return CoEvolution(
        config,
        backend=backend or ScriptedBackend(seed=config.seed),
        train_questions=questions(64),
        optimizer=optimizer,
        sink=sink if sink is not None else ListSink(),
        out_dir=run_dir,
        control=FileControlChannel(run_dir),
        **kwargs,
    )


def send(run_dir, request_id, action):
    FileControlChannel(run_dir).append(ControlRequest(request_id, action))


def outcomes(sink):
    return {e.request_id: e for e in sink.of(ControlHandled)}


def run_with_requests(config, optimizer, run_dir, requests_after, *, steps=None, sink=None):
    """Run, sending `requests_after[step]` (a list of (id, action)) once that step has ended."""
    loop = make_loop(config, optimizer, run_dir, sink=sink)
    done = []

    def between_steps():
        done.append(loop.progress.step)
        for request_id, action in requests_after.get(loop.progress.step, []):
            send(run_dir, request_id, action)
        return steps is not None and len(done) >= steps

    loop.should_stop = between_steps
    return loop, loop.run()


@pytest.mark.slow
def test_a_verified_injection_joins_before_the_next_step_as_human_with_its_author(gemini, tmp_path):
    sink = ListSink()
    loop, _ = run_with_requests(
        RunConfig.from_dict(SMALL), gemini, tmp_path, {1: [("1", Inject(GOOD, "ada"))]}, steps=3, sink=sink
    )
    handled = outcomes(sink)["1"]
    assert handled.status == "applied" and handled.step == 2 and handled.author == "ada"
    assert handled.verify_score is not None and "verified" in handled.message
    added = [e for e in sink.of(InstructionAdded) if e.instruction.origin == "human"]
    assert len(added) == 1 and added[0].step == 2 and added[0].instruction.author == "ada"
    assert added[0].instruction.parent_id is None and added[0].verify_score == handled.verify_score
    verified = [e for e in sink.of(InstructionVerified) if e.round_id == "control-1"]
    assert len(verified) == 1 and verified[0].n_questions == 16 and verified[0].candidates[0].accepted
    assert verified[0].parent_score is not None  # I*, the bar, scored on the same questions
    steered = [e for e in sink.of(PopulationChanged) if e.reason == "steered"]
    assert [e.step for e in steered] == [2] and handled.instruction_id in {m.id for m in steered[0].members}
    assert loop.population.get(handled.instruction_id).author == "ada"


@pytest.mark.slow
def test_an_injection_that_scores_below_the_best_is_rejected_and_changes_nothing(gemini, tmp_path):
    sink = ListSink()
    loop, _ = run_with_requests(
        RunConfig.from_dict(SMALL), gemini, tmp_path, {1: [("1", Inject(HARMFUL, "ada"))]}, steps=3, sink=sink
    )
    handled = outcomes(sink)["1"]
    assert handled.status == "rejected" and "below the bar" in handled.message and "I*" in handled.message
    assert handled.verify_score is not None
    assert not [e for e in sink.of(InstructionAdded) if e.instruction.origin == "human"]
    assert not [e for e in sink.of(PopulationChanged) if e.reason == "steered"]
    assert len(loop.population) == 3


@pytest.mark.slow
def test_an_injection_waits_for_questions_to_verify_on_and_one_without_verification_joins_at_once(gemini, tmp_path):
    send(tmp_path, "verified", Inject(GOOD, "ada"))
    send(tmp_path, "unverified", Inject("Answer in one word.", "bo", verify=False))
    sink = ListSink()
    loop = make_loop(RunConfig.from_dict(SMALL), gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 2
    loop.run()
    handled = outcomes(sink)
    # before step 1 the replay buffer is empty: the verified one waits a step, the unverified one does not
    assert handled["unverified"].step == 1 and handled["verified"].step == 2
    assert handled["unverified"].status == "applied" and handled["unverified"].verify_score is None
    unverified = loop.population.get(handled["unverified"].instruction_id)
    assert unverified.origin == "human" and unverified.verify_score is None and unverified.author == "bo"
    assert "unverified" in handled["unverified"].message


@pytest.mark.slow
def test_a_verified_injection_must_keep_the_protocol_tags_an_unverified_one_need_not(gemini, tmp_path):
    send(tmp_path, "1", Inject("Just answer.", "ada"))
    sink = ListSink()
    loop = make_loop(RunConfig.from_dict(SMALL), gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    handled = outcomes(sink)["1"]
    assert handled.status == "rejected" and "<search>" in handled.message and handled.step == 1


@pytest.mark.parametrize(
    ("action", "says"),
    [
        (Retire("ins-0099"), "no instruction ins-0099"),
        (Pin("ins-0099"), "no instruction ins-0099"),
        (Inject("", "ada"), "empty"),
        (Inject("x" * 20_001, "ada", verify=False), "at most 20000"),
    ],
)
@pytest.mark.slow
def test_requests_that_name_nothing_or_carry_nothing_are_rejected_with_the_reason(gemini, tmp_path, action, says):
    send(tmp_path, "1", action)
    sink = ListSink()
    loop = make_loop(RunConfig.from_dict(SMALL), gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    handled = outcomes(sink)["1"]
    assert handled.status == "rejected" and says in handled.message


@pytest.mark.slow
def test_retire_by_hand_refuses_a_pinned_one_and_the_last_one(gemini, tmp_path):
    config = RunConfig.from_dict(SMALL).with_overrides(
        {"population.population_size": 2, "population.initial_instructions": [f"{TAGS} Answer carefully."]}
    )
    send(tmp_path, "pin", Pin("ins-0000", "ada"))
    send(tmp_path, "retire-pinned", Retire("ins-0000", "ada"))
    send(tmp_path, "retire", Retire("ins-0001", "ada"))
    send(tmp_path, "unpin", Unpin("ins-0000", "ada"))
    send(tmp_path, "retire-last", Retire("ins-0000", "ada"))
    send(tmp_path, "retire-again", Retire("ins-0001", "ada"))
    with (tmp_path / REQUESTS_FILE).open("a") as handle:
        handle.write('{"id": "odd", "kind": "promote", "instruction_id": "ins-0000"}\n')
    sink = ListSink()
    loop = make_loop(config, gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    handled = outcomes(sink)
    assert [e.request_id for e in sink.of(ControlHandled)][:6] == [
        "pin",
        "retire-pinned",
        "retire",
        "unpin",
        "retire-last",
        "retire-again",
    ]
    assert handled["pin"].status == "applied"
    assert handled["retire-pinned"].status == "rejected" and "pinned" in handled["retire-pinned"].message
    assert handled["retire"].status == "applied"
    assert handled["unpin"].status == "applied" and not loop.population.get("ins-0000").pinned
    assert handled["retire-last"].status == "rejected" and "last living" in handled["retire-last"].message
    assert handled["retire-again"].status == "rejected" and "retired at step 1" in handled["retire-again"].message
    assert handled["odd"].status == "rejected" and "unknown kind 'promote'" in handled["odd"].message
    pruned = [e for e in sink.of(InstructionPruned) if e.instruction_id == "ins-0001"]
    assert [(e.step, e.reason) for e in pruned] == [(1, "retired by hand by ada")]
    assert [m.id for m in loop.population.members] == ["ins-0000"]


@pytest.mark.slow
def test_an_injection_into_a_full_population_retires_the_lowest_weight_unpinned_member_and_says_so(gemini, tmp_path):
    send(tmp_path, "pin", Pin("ins-0002", "ada"))
    send(tmp_path, "full", Inject("Answer briefly.", "ada", verify=False))
    sink = ListSink()
    config = RunConfig.from_dict(SMALL).with_overrides({"population.population_size": 3})
    loop = make_loop(config, gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    handled = outcomes(sink)["full"]
    # all three weigh 0 before the first step: the youngest unpinned one ranks last
    assert handled.status == "applied" and handled.message == (
        "ins-0003 joined unverified, as asked; the population was full, so ins-0001 (the lowest-weight unpinned "
        "member) retired to make room"
    )
    assert [m.id for m in loop.population.members] == ["ins-0000", "ins-0002", "ins-0003"]
    pruned = [(e.instruction_id, e.reason) for e in sink.of(InstructionPruned) if e.step == 1]
    assert ("ins-0001", "retired to make room for an instruction injected by ada") in pruned


@pytest.mark.slow
def test_a_full_population_whose_members_are_all_pinned_refuses_an_injection(gemini, tmp_path):
    for member in ("ins-0000", "ins-0001", "ins-0002"):
        send(tmp_path, f"pin-{member}", Pin(member, "ada"))
    send(tmp_path, "full", Inject("Answer briefly.", "ada", verify=False))
    sink = ListSink()
    config = RunConfig.from_dict(SMALL).with_overrides({"population.population_size": 3})
    loop = make_loop(config, gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    handled = outcomes(sink)["full"]
    assert handled.status == "rejected" and "full (3 of 3) and every member is pinned" in handled.message
    assert len(loop.population) == 3


# -- pinning against successive halving and evolution ---------------------------------------------------------------


def paper_population(pinned: str | None = None) -> Population:
    """N_P = 7, N_parent = 1, τ = 0.2: seven instructions whose weights are 0.7, 0.6, …, 0.1 in birth order."""
    population = Population(max_size=7, n_parents=1, temperature=0.2, weight_window=5)
    for i in range(7):
        population.add(f"instruction {i}", origin="seed" if i == 0 else "paraphrase", step=0)
        population.record_step(1, {f"ins-{i:04d}": [0.7 - 0.1 * i]})
    if pinned:
        population.get(pinned).pinned = True
    return population


def test_successive_halving_at_the_papers_numbers_never_drops_a_pinned_instruction():
    """N_P = 7 → 4 → 2 → 1 at K_p steps; with the worst one pinned, the other six are halved as if it were not there
    (6 → 3 → 2 → 1), the best first, and it rides along."""
    plain, pinned = paper_population(), paper_population(pinned="ins-0006")
    sizes_plain, unpinned = [], []
    for step in (5, 10, 15):
        plain.prune(step)
        pinned.prune(step)
        sizes_plain.append(len(plain))
        unpinned.append([m.id for m in pinned.members if not m.pinned])
        assert pinned.get("ins-0006").alive and len(pinned) >= pinned.n_parents
        assert pinned.best().id == "ins-0000"
    assert sizes_plain == [4, 2, 1]
    assert unpinned == [["ins-0000", "ins-0001", "ins-0002"], ["ins-0000", "ins-0001"], ["ins-0000"]]
    assert [m.id for m in pinned.members] == ["ins-0000", "ins-0006"]
    assert pinned.prune(20) == [] and pinned.get("ins-0006").prune_step is None


def test_a_pinned_best_instruction_does_not_stand_in_for_the_parents_pruning_keeps():
    population = paper_population(pinned="ins-0000")
    for step in (5, 10, 15, 20):
        population.prune(step)
    assert [m.id for m in population.members] == ["ins-0000", "ins-0001"]


@pytest.mark.slow
def test_a_pinned_instruction_keeps_its_slot_through_evolution_and_pruning_in_a_run(tmp_path):
    config = preset("paper").with_overrides(
        {
            "optimizer.provider": "rules",
            "grpo.total_steps": 31,
            "evolution.evolve_until": 30,
            "batch_size": 8,
            "mini_batch_size": 8,
            "micro_batch_size": 8,
            "group_size": 2,
            "verify_samples": 6,
            "checkpoint.checkpoint_every": 0,
        }
    )
    send(tmp_path, "1", Pin("ins-0006", "ada"))
    sink = ListSink()
    loop = make_loop(config, optimizer_for(config, tmp_path, None), tmp_path, sink=sink)
    loop.run()
    assert outcomes(sink)["1"].status == "applied" and outcomes(sink)["1"].step == 1
    assert loop.population.get("ins-0006").alive and loop.population.get("ins-0006").pinned
    assert not [e for e in sink.of(InstructionPruned) if e.instruction_id == "ins-0006"]
    assert [e.step for e in sink.of(EvolutionCompleted)] == [15, 30]
    sizes = [len(e.members) for e in sink.of(PopulationChanged)]
    assert max(sizes) == 7 and min(sizes) >= 2  # the parent and the pinned one
    for event in sink.of(PopulationChanged):
        assert "ins-0006" in {m.id for m in event.members}
    evolved = [e for e in sink.of(PopulationChanged) if e.reason == "evolved"]
    assert evolved and all(len(e.members) <= 7 for e in evolved)


# -- saved state and exact replay --------------------------------------------------------------------------------

RESUME = {
    **SMALL,
    "seed": 5,
    "grpo": {"total_steps": 7, "group_size": 3, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
    "population": {"population_size": 4, "prune_every": 3, "paraphrase_init": False, "initial_instructions": []},
    "evolution": {"evolve_every": 3, "evolve_until": 7, "verify_samples": 10},
    "checkpoint": {"checkpoint_every": 3, "keep_last": 0},
}
REQUESTS_AFTER = {
    1: [("1", Inject(GOOD, "ada"))],
    2: [("2", Pin("ins-0000", "ada"))],
    4: [("3", Retire("ins-0001", "bo")), ("4", Inject(f"{GOOD} Be brief.", "bo"))],
}


@pytest.mark.slow
def test_the_handled_requests_are_part_of_the_saved_state(gemini, tmp_path):
    run_with_requests(RunConfig.from_dict(RESUME), gemini, tmp_path, REQUESTS_AFTER)
    state = json.loads((tmp_path / "checkpoints" / "step-000006" / "inspo_state.json").read_text())
    assert state["control"]["handled"] == {"1": 2, "2": 3, "3": 5, "4": 5}
    assert any(i["origin"] == "human" and i["author"] == "ada" for i in state["population"]["archive"])


@pytest.mark.slow
def test_a_resumed_run_replays_each_request_before_the_step_it_was_handled_before(gemini, tmp_path):
    """Straight: requests arrive live. Interrupted: the attempt dies after step 5 (its requests 3 and 4 were
    handled before step 5, after the checkpoint of step 3); the next attempt starts from that checkpoint with every
    request already in the file, and still ends where the straight run ends."""
    config = RunConfig.from_dict(RESUME)
    straight_loop, straight = run_with_requests(config, gemini, tmp_path / "a", REQUESTS_AFTER)

    lost = make_loop(config, gemini, tmp_path / "b", backend=ScriptedBackend(seed=5))

    def crash_after_step_5():
        for request_id, action in REQUESTS_AFTER.get(lost.progress.step, []):
            send(tmp_path / "b", request_id, action)
        if lost.progress.step == 5:
            raise RuntimeError("worker lost")
        return False

    lost.should_stop = crash_after_step_5
    with pytest.raises(RuntimeError):
        lost.run()
    assert latest_checkpoint(tmp_path / "b").name == "step-000003"

    sink = ListSink()
    backend = ScriptedBackend(seed=999)
    resumed = make_loop(config, gemini, tmp_path / "b", sink=sink, backend=backend)
    resumed.load_checkpoint(latest_checkpoint(tmp_path / "b"))
    result = resumed.run()

    replayed = [(e.request_id, e.step, e.status) for e in sink.of(ControlHandled)]
    assert replayed == [("3", 5, "applied"), ("4", 5, "applied")]
    assert resumed.population.archive == straight_loop.population.archive
    assert straight_loop.backend.requests[3:] == backend.requests
    assert resumed.sample_rng.getstate() == straight_loop.sample_rng.getstate()
    assert resumed.replay_rng.getstate() == straight_loop.replay_rng.getstate()
    assert result.best_instruction == straight.best_instruction
    assert not sink.of(RunFailed)


def test_a_request_is_read_back_from_its_wire_form_and_a_bad_one_is_invalid():
    request = request_from_dict(
        {"id": 7, "kind": "inject", "text": "Be brief.", "author": "ada", "verify": False, "at_step": 3}, "x"
    )
    assert request == ControlRequest("7", Inject("Be brief.", "ada", False), 3)
    assert request_from_dict({"kind": "inject", "text": 5}, "line-2").action.kind == "invalid"
    assert request_from_dict({"kind": "retire"}, "line-3").id == "line-3"


@pytest.mark.slow
def test_the_command_line_queues_requests_in_the_run_directory_and_lists_their_outcomes(gemini, tmp_path, capsys):
    assert main(["control", "--out", str(tmp_path), "--author", "ada", "inject", "Answer briefly.", "--no-verify"]) == 0
    assert main(["control", "--out", str(tmp_path), "pin", "ins-0001"]) == 0
    requests = FileControlChannel(tmp_path).poll()
    assert [(r.id, r.action.kind) for r in requests] == [("cli-1", "inject"), ("cli-2", "pin")]
    assert requests[0].action == Inject("Answer briefly.", "ada", verify=False)
    sink = JsonlSink(tmp_path / "events.jsonl")
    loop = make_loop(RunConfig.from_dict(SMALL), gemini, tmp_path, sink=sink)
    loop.should_stop = lambda: loop.progress.step >= 1
    loop.run()
    sink.close()
    capsys.readouterr()
    assert main(["control", "--out", str(tmp_path), "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "applied before step 1: ins-0003 joined unverified, as asked" in listed[0]
    assert "applied before step 1: ins-0001 pinned" in listed[1]
    assert main(["control", "--out", str(tmp_path / "nowhere"), "retire", "ins-0001"]) == 2
