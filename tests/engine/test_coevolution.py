"""Algorithm 1 end to end over a scripted policy and a Gemini-format optimizer server."""

import json

import pytest

from inspo_engine.checkpoints import latest_checkpoint
from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import (
    BudgetExhausted,
    CheckpointSaved,
    EvolutionCompleted,
    InstructionAdded,
    InstructionProposed,
    InstructionPruned,
    InstructionVerified,
    JsonlSink,
    ListSink,
    OptimizerFailed,
    PopulationChanged,
    RunFailed,
    RunFinished,
    RunSuperseded,
    StageStarted,
    StepCompleted,
    read_events,
)
from inspo_engine.optimizers import GeminiClient, HttpSettings
from inspo_engine.schedule import phases_for

from .fakes import SKILLS, ScriptedBackend, gemini_handler, questions, success_rate

GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"

SMALL = {
    "seed": 3,
    "grpo": {"total_steps": 45, "group_size": 4, "batch_size": 16, "mini_batch_size": 16, "micro_batch_size": 16},
    "population": {"population_size": 4},
    "evolution": {"evolve_every": 15, "evolve_until": 30, "verify_samples": 40, "n_candidates": 6},
    "optimizer": {"max_retries": 0},
}


@pytest.fixture
def gemini(httpserver):
    httpserver.expect_request(GENERATE, method="POST").respond_with_handler(gemini_handler)
    return GeminiClient(HttpSettings(api_key="test-key", base_url=httpserver.url_for("/"), max_retries=0, timeout_s=10))


def make_loop(config, optimizer, sink=None, backend=None, **kwargs):
    return CoEvolution(
        config,
        backend=backend or ScriptedBackend(seed=config.seed),
        train_questions=questions(64),
        optimizer=optimizer,
        sink=sink if sink is not None else ListSink(),
        **kwargs,
    )


@pytest.mark.slow
def test_reflection_with_verification_beats_the_static_baseline_in_the_same_steps(gemini):
    config = RunConfig.from_dict(SMALL)
    inspo = make_loop(config, gemini).run()
    static = make_loop(config.with_overrides({"mode": "static"}), None).run()

    weight = inspo.best_instruction.weight(config.population.weight_window)
    baseline = static.best_instruction.weight(config.population.weight_window)
    assert static.best_instruction.origin == "seed"
    assert inspo.best_instruction.origin == "reflection"
    assert weight > baseline + 0.2
    assert success_rate(inspo.best_instruction.text) > success_rate(static.best_instruction.text) + 0.2


@pytest.mark.slow
def test_verification_keeps_harmful_candidates_out(gemini):
    config = RunConfig.from_dict(SMALL)
    sink = ListSink()
    make_loop(config, gemini, sink).run()
    verdicts = [c for event in sink.of(InstructionVerified) for c in event.candidates]
    harmful = [c for c in verdicts if "guess quickly" in c.text]
    assert harmful and not any(c.accepted for c in harmful)
    for event in sink.of(InstructionVerified):
        kept = [c.score for c in event.candidates if c.accepted]
        left = [c.score for c in event.candidates if not c.accepted]
        assert not kept or not left or min(kept) >= max(left)


@pytest.mark.slow
def test_a_candidate_that_drops_a_required_tag_is_rejected_with_the_reason(gemini):
    sink = ListSink()
    make_loop(RunConfig.from_dict(SMALL), gemini, sink).run()
    rejected = [c for event in sink.of(InstructionProposed) for c in event.candidates if not c.valid]
    assert any("</search>" in (c.reason or "") for c in rejected)


@pytest.mark.slow
def test_the_schedule_prunes_every_k_p_and_evolves_every_k_e_until_t_e(gemini):
    config = RunConfig.from_dict(SMALL)
    sink = ListSink()
    make_loop(config, gemini, sink).run()
    assert [e.step for e in sink.of(EvolutionCompleted)] == [15, 30]
    prune_steps = sorted({e.step for e in sink.of(InstructionPruned) if e.reason == "pruned"})
    assert prune_steps and all(step % 5 == 0 for step in prune_steps)
    sizes = [len(e.members) for e in sink.of(PopulationChanged)]
    assert max(sizes) == 4 and min(sizes) >= config.population.n_parents
    steps = sink.of(StepCompleted)
    assert [s.step for s in steps] == list(range(1, 46))


@pytest.mark.slow
def test_the_critique_and_the_failures_shown_are_kept_with_each_child(gemini):
    sink = ListSink()
    make_loop(RunConfig.from_dict(SMALL), gemini, sink).run()
    proposals = {e.round_id: e for e in sink.of(InstructionProposed) if e.proposer == "reflection"}
    children = [e for e in sink.of(InstructionAdded) if e.instruction.origin == "reflection"]
    assert children
    for child in children:
        proposal = proposals[child.round_id]
        assert child.instruction.parent_id == proposal.parent_id
        assert proposal.critique.startswith("The failures show")
        assert len(proposal.failures) == 4
        assert all(f["golden_answers"] for f in proposal.failures)
        assert child.verify_score is not None


@pytest.mark.slow
def test_overhead_counts_verification_against_training_rollouts(gemini):
    config = RunConfig.from_dict(SMALL)
    sink = ListSink()
    result = make_loop(config, gemini, sink).run()
    finished = sink.of(RunFinished)[0]
    assert result.status == "finished"
    assert finished.overhead.training_rollouts == 45 * 16 * 4
    candidates = sum(len(e.candidates) for e in sink.of(InstructionVerified))
    parents = len({(e.step, e.parent_id) for e in sink.of(InstructionVerified)})  # each scored once per evolution
    verified = (candidates + parents) * 40
    assert finished.overhead.verification_rollouts == verified
    assert finished.overhead.optimizer_calls == len(sink.of(InstructionProposed))
    assert finished.overhead.optimizer_tokens == 150 * finished.overhead.optimizer_calls


@pytest.mark.slow
def test_without_verification_candidates_join_unscored(gemini):
    config = RunConfig.from_dict(SMALL).with_overrides({"evolution.verify": False})
    sink = ListSink()
    make_loop(config, gemini, sink).run()
    assert sink.of(InstructionVerified) == []
    children = [e for e in sink.of(InstructionAdded) if e.instruction.origin == "reflection"]
    assert children and all(c.verify_score is None for c in children)


@pytest.mark.slow
def test_without_pruning_the_population_stays_full(gemini):
    config = RunConfig.from_dict(SMALL).with_overrides({"population.prune": False, "evolution.enabled": False})
    sink = ListSink()
    make_loop(config, gemini, sink).run()
    assert {len(e.members) for e in sink.of(PopulationChanged)} == {4}


@pytest.mark.parametrize("proposer", ["paraphrase", "history"])
@pytest.mark.slow
def test_the_other_proposers_drive_evolution_too(gemini, proposer):
    config = RunConfig.from_dict(SMALL).with_overrides({"evolution.proposer": proposer})
    sink = ListSink()
    make_loop(config, gemini, sink).run()
    assert {e.proposer for e in sink.of(InstructionProposed)} == {"paraphrase", proposer}
    assert any(e.instruction.origin == proposer for e in sink.of(InstructionAdded))


@pytest.mark.parametrize(("mode", "phases"), [("pre", ["optimise", "train"]), ("post", ["train", "optimise"])])
@pytest.mark.slow
def test_instructions_can_be_optimised_before_or_after_rl_instead_of_online(gemini, mode, phases):
    config = RunConfig.from_dict(SMALL).with_overrides({"mode": mode})
    assert [p.name for p in phases_for(config)] == phases
    sink = ListSink()
    backend = ScriptedBackend(seed=3)
    make_loop(config, gemini, sink, backend=backend).run()
    steps = sink.of(StepCompleted)
    assert [s.phase for s in steps] == [phases[0]] * (45 if phases[0] == "train" else 30) + [phases[1]] * (
        30 if phases[0] == "train" else 45
    )
    assert backend.updates == 45
    evolutions = [e.step for e in sink.of(EvolutionCompleted)]
    assert evolutions == ([15, 30] if mode == "pre" else [60, 75])
    if mode == "pre":
        train_sizes = {len(e.members) for e in sink.of(PopulationChanged) if e.step > 30}
        assert train_sizes == {1}


@pytest.mark.slow
def test_a_spent_budget_stops_evolution_with_an_event_and_training_goes_on(gemini):
    config = RunConfig.from_dict(SMALL).with_overrides({"optimizer.max_calls": 2})
    sink = ListSink()
    result = make_loop(config, gemini, sink).run()
    assert len(sink.of(InstructionProposed)) == 2
    assert len(sink.of(BudgetExhausted)) == 1
    assert result.status == "finished" and len(sink.of(StepCompleted)) == 45


@pytest.mark.slow
def test_a_failing_optimizer_is_reported_and_training_goes_on(httpserver):
    body = {"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}
    httpserver.expect_request(GENERATE, method="POST").respond_with_json(body, status=500)
    client = GeminiClient(HttpSettings(api_key="k", base_url=httpserver.url_for("/"), max_retries=0, timeout_s=10))
    sink = ListSink()
    result = make_loop(RunConfig.from_dict(SMALL), client, sink).run()
    assert sink.of(OptimizerFailed)
    assert result.status == "finished"
    assert result.best_instruction.origin == "seed"


def test_an_evolving_config_without_an_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer"):
        make_loop(RunConfig.from_dict(SMALL), None)


RESUME = {
    "seed": 5,
    "grpo": {"total_steps": 6, "group_size": 3, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
    "population": {"population_size": 4, "prune_every": 2},
    "evolution": {"evolve_every": 3, "evolve_until": 6, "verify_samples": 10},
    "checkpoint": {"checkpoint_every": 0, "keep_last": 0},
}


@pytest.mark.slow
def test_six_steps_straight_equal_three_then_resume_then_three(gemini, tmp_path):
    config = RunConfig.from_dict(RESUME)
    straight_backend = ScriptedBackend(seed=5)
    straight_loop = make_loop(config, gemini, backend=straight_backend, out_dir=tmp_path / "a")
    straight = straight_loop.run()

    first_backend = ScriptedBackend(seed=5)
    stopper = make_loop(config, gemini, backend=first_backend, out_dir=tmp_path / "b", should_stop=lambda: True)
    steps_done = []
    stopper.should_stop = lambda: steps_done.append(1) or len(steps_done) >= 3
    halted = stopper.run()
    assert halted.status == "cancelled" and halted.step == 3

    second_backend = ScriptedBackend(seed=999)
    resumed = make_loop(config, gemini, backend=second_backend, out_dir=tmp_path / "b")
    resumed.load_checkpoint(latest_checkpoint(tmp_path / "b"))
    result = resumed.run()

    assert first_backend.requests + second_backend.requests == straight_backend.requests
    assert resumed.population.archive == straight_loop.population.archive
    assert resumed.budget == straight_loop.budget
    assert result.best_instruction == straight.best_instruction


@pytest.mark.slow
def test_events_go_to_a_jsonl_file_and_read_back_the_same(gemini, tmp_path):
    config = RunConfig.from_dict(RESUME)
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    memory = ListSink()

    class Both:
        def emit(self, event):
            sink.emit(event)
            memory.emit(event)

    make_loop(config, gemini, Both(), out_dir=tmp_path).run()
    sink.close()
    again = read_events(path)
    assert again == memory.events
    kinds = {json.loads(line)["kind"] for line in path.read_text().splitlines()}
    assert {
        "run_started",
        "step_completed",
        "population_changed",
        "instruction_proposed",
        "instruction_verified",
        "instruction_added",
        "instruction_pruned",
        "evolution_completed",
        "checkpoint_saved",
        "run_finished",
        "trajectories_sampled",
    } <= kinds


@pytest.mark.slow
def test_each_stage_is_announced_before_its_work_so_a_hang_can_be_placed(gemini, tmp_path):
    config = RunConfig.from_dict(RESUME).with_overrides({"checkpoint.checkpoint_every": 3})
    sink = ListSink()
    make_loop(config, gemini, sink, out_dir=tmp_path).run()
    stages = [(e.step, e.stage) for e in sink.of(StageStarted)]
    assert stages[0] == (0, "initialise")
    assert [s for s in stages if s[0] == 1] == [(1, "rollout"), (1, "update")]
    step_3 = [stage for step, stage in stages if step == 3]
    assert step_3[:2] == ["rollout", "update"] and {"propose", "verify", "checkpoint"} <= set(step_3)
    kinds = [e.kind for e in sink.events]
    first_rollout = kinds.index("stage_started")
    assert kinds.index("step_completed") > first_rollout


@pytest.mark.slow
def test_a_loop_that_no_longer_owns_its_run_stops_without_a_checkpoint_or_a_failure_event(gemini, tmp_path):
    """Another process took the run over: the next checkpoint is not written, and nothing says the run failed."""
    config = RunConfig.from_dict(RESUME).with_overrides({"checkpoint.checkpoint_every": 2})
    sink = ListSink()
    owner = {"us": True}
    loop = make_loop(config, gemini, sink, out_dir=tmp_path, owns_run=lambda: owner["us"])

    def taken_over_after_step_3():
        owner["us"] = loop.progress.step < 3
        return False

    loop.should_stop = taken_over_after_step_3
    with pytest.raises(RunSuperseded, match="checkpoint of step 4 is not written"):
        loop.run()
    assert [e.step for e in sink.of(CheckpointSaved)] == [2]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000002"]
    assert not sink.of(RunFailed) and not sink.of(RunFinished)


@pytest.mark.slow
def test_checkpoints_hold_the_policy_and_the_loop_state_and_old_ones_are_dropped(gemini, tmp_path):
    config = RunConfig.from_dict(RESUME).with_overrides({"checkpoint.checkpoint_every": 1, "checkpoint.keep_last": 2})
    sink = ListSink()
    make_loop(config, gemini, sink, out_dir=tmp_path).run()
    saved = sink.of(CheckpointSaved)
    assert [e.step for e in saved] == [1, 2, 3, 4, 5, 6]
    remaining = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert remaining == ["step-000005", "step-000006"]
    state = json.loads((tmp_path / "checkpoints" / "step-000006" / "inspo_state.json").read_text())
    assert state["schema_version"] == 1 and state["progress"]["step"] == 6
    assert (tmp_path / "checkpoints" / "step-000006" / "policy" / "scripted.json").exists()


def test_a_checkpoint_of_another_schema_version_is_refused(gemini, tmp_path):
    loop = make_loop(RunConfig.from_dict(RESUME), gemini, out_dir=tmp_path)
    state = loop.state()
    state["schema_version"] = 99
    with pytest.raises(ValueError, match="schema_version 99"):
        loop.load_state(state)


def test_skill_phrases_are_what_the_scripted_policy_rewards():
    plain = success_rate("Answer.")
    assert all(success_rate(f"Answer. Always {phrase}.") > plain for phrase in SKILLS)


# -- random-pool: INSPO's initial population, sampled uniformly, never optimised ---------------------------------


def random_pool_run(tmp_path, **overrides):
    from inspo_engine.optimizers import optimizer_for

    config = RunConfig.from_dict(SMALL).with_overrides(
        {"mode": "random-pool", "optimizer.provider": "rules", **overrides}
    )
    sink, backend = ListSink(), ScriptedBackend(seed=config.seed)
    result = make_loop(config, optimizer_for(config, tmp_path, None), sink, backend).run()
    return config, sink, backend, result


@pytest.mark.slow
def test_random_pool_draws_as_many_instructions_as_inspos_population_once_before_step_0(tmp_path):
    config, sink, _, _ = random_pool_run(tmp_path)
    added = sink.of(InstructionAdded)
    assert len(added) == config.population.population_size == 4
    assert {event.step for event in added} == {0}
    assert added[0].instruction.origin == "seed"
    assert {event.instruction.origin for event in added[1:]} == {"paraphrase"}
    sizes = {len(event.members) for event in sink.of(PopulationChanged)}
    assert sizes == {4}


@pytest.mark.slow
def test_random_pool_is_never_pruned_evolved_or_verified(tmp_path):
    _, sink, _, result = random_pool_run(tmp_path)
    assert len(sink.of(StepCompleted)) == 45
    assert not sink.of(InstructionPruned) and not sink.of(InstructionVerified) and not sink.of(EvolutionCompleted)
    assert {event.step for event in sink.of(InstructionProposed)} == {0}  # the initial paraphrases only
    assert result.status == "finished"


@pytest.mark.slow
def test_random_pool_samples_uniformly_and_its_weights_never_change(tmp_path):
    _, sink, backend, result = random_pool_run(tmp_path)
    for event in sink.of(PopulationChanged):
        assert [m.weight for m in event.members] == [0.0] * 4
        assert [m.probability for m in event.members] == pytest.approx([0.25] * 4)
    counts: dict[str, int] = {}
    for step in backend.requests:
        for instruction_id in step:
            counts[instruction_id] = counts.get(instruction_id, 0) + 1
    assert len(counts) == 4 and sum(counts.values()) == 45 * 16
    assert all(130 <= n <= 230 for n in counts.values()), counts  # 180 each expected; softmax(w/0.2) would not be
    assert result.best_instruction.origin == "seed"  # I* is not chosen by reward either


@pytest.mark.slow
def test_the_same_seed_replays_the_same_random_pool_samples(tmp_path):
    first = random_pool_run(tmp_path)[2].requests
    again = random_pool_run(tmp_path)[2].requests
    assert first == again


# -- evaluation keeps every question --------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_evaluation_keeps_each_questions_id_em_f1_and_answer_in_events_and_the_run_directory(tmp_path):
    from inspo_engine.coevolution import evaluation_file, read_answers
    from inspo_engine.events import EvalCompleted, event_from_dict

    config = RunConfig.from_dict(SMALL).with_overrides(
        {"mode": "static", "total_steps": 4, "evolve_until": 4, "eval.eval_every": 2}
    )
    sink = ListSink()
    make_loop(config, None, sink, out_dir=tmp_path, eval_sets={"held-out": questions(64)[-10:]}).run()
    evaluations = sink.of(EvalCompleted)
    assert [e.step for e in evaluations] == [2, 4]
    final = evaluations[-1]
    assert [a["question_id"] for a in final.answers] == [q.id for q in questions(64)[-10:]]
    assert set(final.answers[0]) == {"question_id", "em", "f1", "answer"}
    assert final.value == pytest.approx(sum(a["em"] for a in final.answers) / 10)
    assert final.f1 == pytest.approx(sum(a["f1"] for a in final.answers) / 10)
    assert read_answers(evaluation_file(tmp_path, 4, "held-out")) == final.answers
    assert event_from_dict(final.to_dict()) == final


def test_an_eval_completed_event_written_before_answers_were_kept_still_loads():
    from inspo_engine.events import EvalCompleted, event_from_dict

    old = {"kind": "eval_completed", "time": 1.0, "step": 3, "benchmark": "nq", "metric": "em", "value": 0.5}
    event = event_from_dict(old | {"n": 2, "instruction_id": "ins-0000", "checkpoint": None})
    assert isinstance(event, EvalCompleted) and event.answers == [] and event.f1 is None


def test_evaluations_report_their_progress_and_name_their_files_by_the_reference(tmp_path):
    """#54 items 4 and 6: the untrained policy's evaluation and the final one say how far they got, a chunk at a
    time, over every benchmark; a benchmark fetched from a data reference names its files after the reference."""
    from inspo_engine.coevolution import EVAL_CHUNK, evaluation_file, read_answers
    from inspo_engine.events import EvalCompleted, EvalProgress
    from inspo_engine.experiments import read_run

    config = RunConfig.from_dict(SMALL).with_overrides(
        {"mode": "static", "total_steps": 1, "evolve_until": 1, "eval.eval_at_start": True}
    )
    sink = ListSink()
    local = str(tmp_path / "cache" / "data" / "snapshots" / "1@1")
    eval_sets = {local: questions(64)[:40], "builtin": questions(64)[40:64]}
    out = tmp_path / "run"
    loop = make_loop(config, None, sink, out_dir=out, eval_sets=eval_sets, benchmark_names={local: "data:hotpot53@1"})
    loop.run()
    progress = [(e.step, e.done, e.total) for e in sink.of(EvalProgress)]
    assert EVAL_CHUNK == 32
    first = [(0, 0, 64), (0, 32, 64), (0, 40, 64), (0, 40, 64), (0, 64, 64)]
    assert progress == first + [(1, done, total) for _, done, total in first]
    kinds = [e.kind for e in sink.events]
    assert kinds.index("eval_progress") < kinds.index("eval_completed") < kinds.index("step_completed")
    assert sorted(p.name for p in (out / "evaluations").iterdir()) == [
        "step-000000-builtin.jsonl",
        "step-000000-data_hotpot53@1.jsonl",
        "step-000001-builtin.jsonl",
        "step-000001-data_hotpot53@1.jsonl",
    ]
    final = next(e for e in sink.of(EvalCompleted) if e.step == 1 and e.benchmark == local)
    assert read_answers(evaluation_file(out, 1, "data:hotpot53@1")) == final.answers  # chunked, in question order
    assert [a["question_id"] for a in final.answers] == [q.id for q in questions(64)[:40]]
    # A run directory written before the names kept '@' still reads back.
    (out / "evaluations" / "step-000001-data_hotpot53@1.jsonl").rename(
        out / "evaluations" / "step-000001-data_hotpot53_1.jsonl"
    )
    written = JsonlSink(out / "events.jsonl")
    for event in sink.events:
        written.emit(event)
    written.close()
    assert read_run(out, ["data:hotpot53@1", "builtin"]).finished
